"""An emulated machine's resources, as machined's COSI state holds them and its resource API serves them:
its SMBIOS system information, processors and memory, its disks, its addresses and its stage
(``MachineStatuses``), with the resource definitions and namespaces that describe them.

Each resource has a version that counts its changes and the times it was created and last updated;
watchers are told of every change. The definitions and namespaces are the same on every machine and kept
once for all.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import grpc

from herder.emu.errors import ApiError
from herder.emu.machine.record import Hardware
from herder.talos.api.cosi import resource_pb2
from herder.talos.machine import resources as res
from herder.talos.machine import roles as talos_roles
from herder.talos.machine.resources import ResourceEventType, ResourceMetadata, Spec
from herder.talos.machine.types import MachineStage

OWNERS = {
    res.SYSTEM_INFORMATION: "hardware.SystemInfoController",
    res.PROCESSOR: "hardware.SystemInfoController",
    res.MEMORY_MODULE: "hardware.SystemInfoController",
    res.DISK: "block.DisksController",
    res.NODE_ADDRESS: "network.NodeAddressController",
    res.MACHINE_STATUS: "runtime.MachineStatusController",
    res.HOSTNAME_STATUS: "network.HostnameStatusController",
    res.MEMBER: "cluster.MemberController",
    res.CLUSTER_INFO: "cluster.InfoController",
    res.SERVICE: "v1alpha1.ServiceController",
    res.NETWORK_STATUS: "network.StatusController",
    res.RESOLVER_STATUS: "network.ResolverSpecController",
    res.TIME_SERVER_STATUS: "network.TimeServerSpecController",
    res.ROUTE_STATUS: "network.RouteStatusController",
    res.LINK_STATUS: "network.LinkStatusController",
    res.VERSION: "runtime.VersionController",
    res.EXTENSION_STATUS: "runtime.ExtensionStatusController",
    res.MACHINE_TYPE: "config.MachineTypeController",
    res.STATIC_POD_STATUS: "k8s.StaticPodStatusController",
    res.KUBELET_SPEC: "k8s.KubeletSpecController",
}
"""The controller of machined that writes each type."""

SECTOR = 512


@dataclass(frozen=True)
class Entry:
    metadata: ResourceMetadata
    spec: Spec | None
    """None for a resource that is gone (a tombstone)."""

    def encode(self) -> resource_pb2.Resource:
        return res.encode_resource(self.metadata, self.spec)


@dataclass(frozen=True)
class Change:
    type: ResourceEventType
    entry: Entry
    old: Entry | None = None


def _shared() -> dict[tuple[str, str], dict[str, Entry]]:
    now = datetime.now(UTC)

    def entry(type: str, id: str, spec: Spec) -> Entry:
        metadata = ResourceMetadata(res.META, type, id, version="1", created=now, updated=now)
        return Entry(metadata, spec)

    definitions = [kind.definition() for kind in res.KINDS.values()]
    return {
        (res.META, res.RESOURCE_DEFINITION): {
            d.type.lower(): entry(res.RESOURCE_DEFINITION, d.type.lower(), d) for d in definitions
        },
        (res.META, res.NAMESPACE): {
            name: entry(res.NAMESPACE, name, res.NamespaceSpec(description=text))
            for name, text in res.NAMESPACES.items()
        },
    }


SHARED = _shared()
"""What every machine serves alike: the resource definitions and the namespaces."""


def check_access(namespace: str, type: str, roles: frozenset[str]) -> None:
    """machined's access policy for reading: only types and namespaces it has, and the sensitive types to
    os:admin only."""
    definition = SHARED[res.META, res.RESOURCE_DEFINITION].get(type.lower())
    if definition is None:
        raise ApiError(grpc.StatusCode.PERMISSION_DENIED, f'resource type "{type}" is not supported')
    if namespace not in SHARED[res.META, res.NAMESPACE]:
        raise ApiError(grpc.StatusCode.PERMISSION_DENIED, f'namespace "{namespace}" is not supported')
    spec = definition.spec
    if isinstance(spec, res.ResourceDefinitionSpec) and spec.sensitivity and talos_roles.ADMIN not in roles:
        raise ApiError(grpc.StatusCode.PERMISSION_DENIED, talos_roles.NOT_AUTHORIZED)


@dataclass(eq=False)
class _Watch:
    namespace: str
    type: str
    id: str | None
    queue: asyncio.Queue[Change | None]

    def wants(self, entry: Entry) -> bool:
        md = entry.metadata
        return (md.namespace, md.type) == (self.namespace, self.type) and self.id in (None, md.id)


Producer = Callable[[], Mapping[str, Spec]]
"""What a collection of derived resources holds now, by id."""


class ResourceState:
    """One machine's resources: read, listed, watched, and written by the machine as it changes.

    Some collections are derived from the machine's state (``derive``): they are made when first read and
    then kept up to date at each ``refresh``, so a collection nobody reads costs nothing."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], dict[str, Entry]] = {}
        self._watches: set[_Watch] = set()
        self._producers: dict[tuple[str, str], Producer] = {}
        self._made: set[tuple[str, str]] = set()

    def derive(self, namespace: str, type: str, produce: Producer) -> None:
        """Let ``produce`` make the collection of that type when first read (once per type)."""
        self._producers.setdefault((namespace, type), produce)

    def refresh(self) -> None:
        """Bring every derived collection read so far up to date (each change is published)."""
        for key in list(self._made):
            self._make(key)

    def _make(self, key: tuple[str, str]) -> None:
        self._made.add(key)
        wanted = self._producers[key]()
        namespace, type = key
        for id in [id for id in self._entries.get(key, {}) if id not in wanted]:
            self.remove(namespace, type, id)
        for id, spec in wanted.items():
            self.put(namespace, type, id, spec)

    def _collection(self, namespace: str, type: str) -> dict[str, Entry]:
        key = (namespace, type)
        if key in self._producers and key not in self._made:
            self._make(key)
        return SHARED.get(key) or self._entries.get(key) or {}

    def get(self, namespace: str, type: str, id: str) -> Entry | None:
        return self._collection(namespace, type).get(id)

    def list(self, namespace: str, type: str) -> list[Entry]:
        collection = self._collection(namespace, type)
        return [collection[id] for id in sorted(collection)]

    def put(self, namespace: str, type: str, id: str, spec: Spec) -> None:
        """Create the resource, or update it if its spec changed (a new version)."""
        collection = self._entries.setdefault((namespace, type), {})
        old = collection.get(id)
        now = datetime.now(UTC)
        if old is None:
            metadata = ResourceMetadata(
                namespace, type, id, version="1", owner=OWNERS.get(type, ""), created=now, updated=now
            )
            collection[id] = Entry(metadata, spec)
            self._publish(Change(ResourceEventType.CREATED, collection[id]))
        elif old.spec != spec:
            metadata = replace(old.metadata, version=str(int(old.metadata.version) + 1), updated=now)
            collection[id] = Entry(metadata, spec)
            self._publish(Change(ResourceEventType.UPDATED, collection[id], old))

    def remove(self, namespace: str, type: str, id: str) -> None:
        old = self._entries.get((namespace, type), {}).pop(id, None)
        if old is not None:
            self._publish(Change(ResourceEventType.DESTROYED, old))

    def _publish(self, change: Change) -> None:
        for watch in self._watches:
            if watch.wants(change.entry):
                watch.queue.put_nowait(change)

    def close(self) -> None:
        """machined is gone (a crash): every watch ends."""
        for watch in self._watches:
            watch.queue.put_nowait(None)

    async def watch(
        self, namespace: str, type: str, id: str | None, *, bootstrap: bool
    ) -> AsyncIterator[Change]:
        """Changes of one resource (first: as it is now, CREATED, or DESTROYED if there is none) or of a
        type (with ``bootstrap``, first every resource as CREATED, then BOOTSTRAPPED), until the state
        closes or the caller stops."""
        watch = _Watch(namespace, type, id, asyncio.Queue())
        self._collection(namespace, type)
        self._watches.add(watch)
        try:
            if id is not None:
                current = self.get(namespace, type, id)
                if current is not None:
                    yield Change(ResourceEventType.CREATED, current)
                else:
                    yield Change(
                        ResourceEventType.DESTROYED, Entry(ResourceMetadata(namespace, type, id), None)
                    )
            elif bootstrap:
                for entry in self.list(namespace, type):
                    yield Change(ResourceEventType.CREATED, entry)
                yield Change(
                    ResourceEventType.BOOTSTRAPPED, Entry(ResourceMetadata(namespace, type, ""), None)
                )
            while (change := await watch.queue.get()) is not None:
                yield change
        finally:
            self._watches.discard(watch)


def selects(
    metadata: ResourceMetadata, label_queries: Sequence[resource_pb2.LabelQuery], id_query: str
) -> bool:
    """Whether a resource matches a list's or a watch's queries: its id the ``id_query`` regular expression
    (anywhere in it), its labels any of the label queries (each one's terms all)."""
    if id_query and re.search(id_query, metadata.id) is None:
        return False
    if not label_queries:
        return True
    return any(all(_term(metadata.labels, t) for t in q.terms) for q in label_queries)


def _term(labels: Mapping[str, str], term: resource_pb2.LabelTerm) -> bool:
    """One label term, as COSI evaluates it (a comparison with a missing label never matches)."""
    op = resource_pb2.LabelTerm
    if term.op == op.NOT_EXISTS:
        return term.key not in labels
    value = labels.get(term.key)
    comparison = term.op in (op.LT, op.LTE, op.LT_NUMERIC, op.LTE_NUMERIC)
    if value is None:
        if comparison:
            return False
        matched = False
    elif term.op != op.EXISTS and not term.value:
        matched = False
    elif term.op == op.EXISTS:
        matched = True
    elif term.op == op.EQUAL:
        matched = value == term.value[0]
    elif term.op == op.IN:
        matched = value in term.value
    elif term.op in (op.LT, op.LTE):
        matched = value < term.value[0] if term.op == op.LT else value <= term.value[0]
    else:
        try:
            left, right = float(value), float(term.value[0])
        except ValueError:
            return False
        matched = left < right if term.op == op.LT_NUMERIC else left <= right
    return not matched if term.invert else matched


# --- what an emulated machine has ---


def hardware_resources(uuid: str, hardware: Hardware) -> list[tuple[str, str, str, Spec]]:
    """(namespace, type, id, spec) of a machine's SMBIOS information, processor, memory and disks."""
    items: list[tuple[str, str, str, Spec]] = [
        (
            res.HARDWARE,
            res.SYSTEM_INFORMATION,
            res.SYSTEM_INFORMATION_ID,
            res.SystemInformationSpec(
                manufacturer=hardware.manufacturer, product_name=hardware.product_name, uuid=uuid
            ),
        ),
        (
            res.HARDWARE,
            res.PROCESSOR,
            "CPU-0",
            res.ProcessorSpec(
                socket="CPU 0",
                manufacturer=hardware.manufacturer,
                product_name=hardware.product_name,
                core_count=hardware.cpus,
                core_enabled=hardware.cpus,
                thread_count=hardware.cpus,
            ),
        ),
        (
            res.HARDWARE,
            res.MEMORY_MODULE,
            "DIMM-0",
            res.MemoryModuleSpec(
                size=hardware.memory_mib, device_locator="DIMM 0", manufacturer=hardware.manufacturer
            ),
        ),
    ]
    items += [(res.RUNTIME, res.DISK, id, spec) for id, spec in disk_specs(hardware)]
    return items


def disk_specs(hardware: Hardware) -> list[tuple[str, res.DiskSpec]]:
    """(id, spec) of a machine's whole disks: its ``Disks`` resources, and what the storage API's ``Disks``
    call answers."""
    specs = []
    for disk in hardware.disks:
        path, size = str(disk["name"]), int(disk["size"])
        spec = res.DiskSpec(
            dev_path=path,
            size=size,
            pretty_size=res.pretty_size(size),
            io_size=SECTOR,
            sector_size=SECTOR,
            model=str(disk.get("model", "")),
            serial=str(disk.get("serial", "")),
            transport="sata",
            sub_system="/sys/class/block",
            rotational=True,
        )
        specs.append((path.removeprefix("/dev/"), spec))
    return specs


def address_resources(address: str) -> list[tuple[str, str, str, Spec]]:
    """(namespace, type, id, spec) of a machine's address sets: its one address, in each."""
    spec = res.NodeAddressSpec(addresses=(f"{address}/32",))
    return [(res.NETWORK, res.NODE_ADDRESS, id, spec) for id in res.NODE_ADDRESS_IDS]


def hostname_resource(hostname: str) -> tuple[str, str, str, Spec]:
    return (
        res.NETWORK,
        res.HOSTNAME_STATUS,
        res.HOSTNAME_STATUS_ID,
        res.HostnameStatusSpec(hostname=hostname),
    )


def extension_resources(schematic: str) -> list[tuple[str, str, str, Spec]]:
    """(namespace, type, id, spec) of the extensions of a machine booted from an Image Factory image: the
    image's ``schematic`` extension, whose version is its schematic ID (none without a schematic)."""
    if not schematic:
        return []
    metadata = res.ExtensionMetadataSpec(
        name=res.SCHEMATIC_EXTENSION,
        version=schematic,
        author="Image Factory",
        description="This image was built by Image Factory with the schematic of this ID.",
        compatibility=res.CompatibilitySpec(talos=res.ConstraintSpec(version=">= 1.0.0")),
    )
    spec = res.ExtensionStatusSpec(image=f"000.{res.SCHEMATIC_EXTENSION}.sqsh", metadata=metadata)
    return [(res.RUNTIME, res.EXTENSION_STATUS, "0", spec)]


def status_resource(
    stage: MachineStage, ready: bool, unmet: tuple[tuple[str, str], ...]
) -> tuple[str, str, str, Spec]:
    return (
        res.RUNTIME,
        res.MACHINE_STATUS,
        res.MACHINE_STATUS_ID,
        res.MachineStatusSpec.of(stage, ready, unmet),
    )
