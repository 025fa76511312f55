"""Talos's resources as its COSI resource API (``cosi.resource.State``) serves them: what ``talosctl get``
reads. A resource is metadata (namespace, type, id, version, owner, phase, times, labels) and a spec that
travels twice: as YAML (``yaml_spec``, what talosctl prints and herder reads) and protobuf-encoded
(``proto_spec``, the type's message in Talos's resource definitions).

This module knows the resource types herder reads, with Talos's exact type names, namespaces, ids and
spec field names (``KINDS``); typed specs for each; and the wire form of resources, for clients and for
servers that answer like machined (the emulator).
"""

from __future__ import annotations

import builtins
import enum
import ipaddress
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeVar

import yaml
from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp
from pydantic import BaseModel, ConfigDict, Field

from herder.talos.api.common import common_pb2
from herder.talos.api.cosi import meta_pb2, resource_pb2
from herder.talos.api.resource.config import config_pb2
from herder.talos.api.resource.definitions.block import block_pb2
from herder.talos.api.resource.definitions.cluster import cluster_pb2
from herder.talos.api.resource.definitions.enums import enums_pb2
from herder.talos.api.resource.definitions.extensions import extensions_pb2
from herder.talos.api.resource.definitions.hardware import hardware_pb2
from herder.talos.api.resource.definitions.k8s import k8s_pb2
from herder.talos.api.resource.definitions.network import network_pb2
from herder.talos.api.resource.definitions.runtime import runtime_pb2
from herder.talos.api.resource.definitions.v1alpha1 import v1alpha1_pb2
from herder.talos.machine.types import MachineStage

# Namespaces (COSI's own, then Talos's).
META = "meta"
HARDWARE = "hardware"
RUNTIME = "runtime"
NETWORK = "network"
CLUSTER = "cluster"
CONFIG = "config"
K8S = "k8s"

RESOURCE_DEFINITION = "ResourceDefinitions.meta.cosi.dev"
NAMESPACE = "Namespaces.meta.cosi.dev"
SYSTEM_INFORMATION = "SystemInformations.hardware.talos.dev"
PROCESSOR = "Processors.hardware.talos.dev"
MEMORY_MODULE = "MemoryModules.hardware.talos.dev"
DISK = "Disks.block.talos.dev"
NODE_ADDRESS = "NodeAddresses.net.talos.dev"
MACHINE_STATUS = "MachineStatuses.runtime.talos.dev"
HOSTNAME_STATUS = "HostnameStatuses.net.talos.dev"
MEMBER = "Members.cluster.talos.dev"
CLUSTER_INFO = "Infos.cluster.talos.dev"
SERVICE = "Services.v1alpha1.talos.dev"
NETWORK_STATUS = "NetworkStatuses.net.talos.dev"
RESOLVER_STATUS = "ResolverStatuses.net.talos.dev"
TIME_SERVER_STATUS = "TimeServerStatuses.net.talos.dev"
ROUTE_STATUS = "RouteStatuses.net.talos.dev"
LINK_STATUS = "LinkStatuses.net.talos.dev"
VERSION = "Versions.runtime.talos.dev"
EXTENSION_STATUS = "ExtensionStatuses.runtime.talos.dev"
MACHINE_TYPE = "MachineTypes.config.talos.dev"
STATIC_POD_STATUS = "StaticPodStatuses.kubernetes.talos.dev"
KUBELET_SPEC = "KubeletSpecs.kubernetes.talos.dev"
SCHEMATIC_EXTENSION = "schematic"
"""The extension an Image Factory image carries whose version is the image's schematic ID."""

SYSTEM_INFORMATION_ID = "systeminformation"
MACHINE_STATUS_ID = "machine"
HOSTNAME_STATUS_ID = "hostname"
CLUSTER_INFO_ID = "current"
NETWORK_STATUS_ID = "status"
RESOLVER_STATUS_ID = "resolvers"
TIME_SERVER_STATUS_ID = "timeservers"
VERSION_ID = "version"
MACHINE_TYPE_ID = "machine-type"
KUBELET_SPEC_ID = "kubelet"
NODE_ADDRESS_IDS = ("default", "current", "routed", "accumulative")
"""default: the one address the node publishes (etcd's peer address); current: the addresses of its up
links now; routed: current without external and SideroLink addresses; accumulative: every address it had."""

VERSION_UNDEFINED = "undefined"
PHASE_RUNNING = "running"


class Spec(BaseModel):
    """A resource spec by its YAML field names (Talos's), which are also how it is built in Python (by the
    field names, which are the proto message's)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    always_marshalled: ClassVar[frozenset[str]] = frozenset()
    """Fields Talos writes to YAML even when empty (the others are ``omitempty``)."""

    def yaml_fields(self) -> dict[str, Any]:
        """The spec as Talos marshals it to YAML: its fields in order, empty ones left out unless always
        written."""
        out: dict[str, Any] = {}
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            if name not in self.always_marshalled and value in ("", 0, False, None, [], ()):
                continue
            out[info.alias or name] = _plain(value)
        return out

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.yaml_fields(), sort_keys=False)

    def to_proto(self) -> Message:
        """The spec as the type's message in Talos's resource definitions (``proto_spec``)."""
        raise NotImplementedError


def _plain(value: Any) -> Any:
    if isinstance(value, Spec):
        return value.yaml_fields()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class SystemInformationSpec(Spec):
    """``SystemInformations.hardware.talos.dev`` (id ``systeminformation``): SMBIOS's system information."""

    manufacturer: str = ""
    product_name: str = Field("", alias="productName")
    version: str = ""
    bios_version: str = Field("", alias="biosVersion")
    serial_number: str = Field("", alias="serialnumber")
    uuid: str = ""
    wake_up_type: str = Field("", alias="wakeUpType")
    sku_number: str = Field("", alias="skuNumber")

    def to_proto(self) -> Message:
        return hardware_pb2.SystemInformationSpec(**self.model_dump())


class ProcessorSpec(Spec):
    """``Processors.hardware.talos.dev``, one per socket (id: the socket's designation, ``CPU-0``)."""

    socket: str = ""
    manufacturer: str = ""
    product_name: str = Field("", alias="productName")
    max_speed: int = Field(0, alias="maxSpeedMhz")
    boot_speed: int = Field(0, alias="bootSpeedMhz")
    status: int = 0
    serial_number: str = Field("", alias="serialNumber")
    asset_tag: str = Field("", alias="assetTag")
    part_number: str = Field("", alias="partNumber")
    core_count: int = Field(0, alias="coreCount")
    core_enabled: int = Field(0, alias="coreEnabled")
    thread_count: int = Field(0, alias="threadCount")

    def to_proto(self) -> Message:
        return hardware_pb2.ProcessorSpec(**self.model_dump())


class MemoryModuleSpec(Spec):
    """``MemoryModules.hardware.talos.dev``, one per module (id: its locator, ``DIMM-0``); size in MiB."""

    size: int = Field(0, alias="sizeMiB")
    device_locator: str = Field("", alias="deviceLocator")
    bank_locator: str = Field("", alias="bankLocator")
    speed: int = 0
    manufacturer: str = ""
    serial_number: str = Field("", alias="serialNumber")
    asset_tag: str = Field("", alias="assetTag")
    product_name: str = Field("", alias="productName")

    def to_proto(self) -> Message:
        return hardware_pb2.MemoryModuleSpec(**self.model_dump())


class DiskSpec(Spec):
    """``Disks.block.talos.dev`` (namespace ``runtime``), one per whole disk (id: its device name, ``sda``);
    sizes in bytes."""

    always_marshalled = frozenset(
        {"dev_path", "size", "pretty_size", "io_size", "sector_size", "readonly", "cdrom"}
    )

    dev_path: str = ""
    size: int = 0
    pretty_size: str = ""
    io_size: int = 0
    sector_size: int = 0
    readonly: bool = False
    cdrom: bool = False
    model: str = ""
    firmware_version: str = ""
    serial: str = ""
    modalias: str = ""
    wwid: str = ""
    uuid: str = ""
    bus_path: str = ""
    sub_system: str = ""
    transport: str = ""
    rotational: bool = False
    secondary_disks: tuple[str, ...] = ()
    symlinks: tuple[str, ...] = ()

    def to_proto(self) -> Message:
        return block_pb2.DiskSpec(**self.model_dump())


class NodeAddressSpec(Spec):
    """``NodeAddresses.net.talos.dev`` (namespace ``network``; ids in ``NODE_ADDRESS_IDS``): addresses as
    prefixes (``10.5.0.2/24``)."""

    always_marshalled = frozenset({"addresses", "sort_algorithm"})

    addresses: tuple[str, ...] = ()
    sort_algorithm: str = Field("v1", alias="sortAlgorithm")
    """``v1`` or ``v2``."""

    def to_proto(self) -> Message:
        prefixes = []
        for text in self.addresses:
            interface = ipaddress.ip_interface(text)
            prefixes.append(
                common_pb2.NetIPPrefix(ip=interface.ip.packed, prefix_length=interface.network.prefixlen)
            )
        algorithm = enums_pb2.NethelpersAddressSortAlgorithm.Value(
            "ADDRESS_SORT_ALGORITHM_" + self.sort_algorithm.upper()
        )
        return network_pb2.NodeAddressSpec(addresses=prefixes, sort_algorithm=algorithm)


class HostnameStatusSpec(Spec):
    """``HostnameStatuses.net.talos.dev`` (namespace ``network``, id ``hostname``): the node's hostname, as
    its config sets it or as Talos makes it up (``talos-xxx-yyy``)."""

    always_marshalled = frozenset({"hostname", "domainname"})

    hostname: str = ""
    domainname: str = ""

    def to_proto(self) -> Message:
        return network_pb2.HostnameStatusSpec(hostname=self.hostname, domainname=self.domainname)


def _ip(text: str) -> common_pb2.NetIP:
    return common_pb2.NetIP(ip=ipaddress.ip_address(text).packed) if text else common_pb2.NetIP()


def _prefix(text: str) -> common_pb2.NetIPPrefix:
    if not text:
        return common_pb2.NetIPPrefix()
    interface = ipaddress.ip_interface(text)
    return common_pb2.NetIPPrefix(ip=interface.ip.packed, prefix_length=interface.network.prefixlen)


def _struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    json_format.ParseDict(dict(value), message)
    return message


_MACHINE_TYPES = {"unknown": 0, "init": 1, "controlplane": 2, "worker": 3}
"""Talos's machine types by name (the enum's numbers, in both the resource definitions and config)."""


class ControlPlaneSpec(Spec):
    always_marshalled = frozenset({"api_server_port"})

    api_server_port: int = Field(0, alias="apiServerPort")


class MemberSpec(Spec):
    """``Members.cluster.talos.dev`` (namespace ``cluster``, id: the member's hostname): a machine of the
    cluster as discovery knows it."""

    always_marshalled = frozenset({"node_id", "addresses", "hostname", "machine_type", "operating_system"})

    node_id: str = Field("", alias="nodeId")
    addresses: tuple[str, ...] = ()
    hostname: str = ""
    machine_type: str = Field("unknown", alias="machineType")
    operating_system: str = Field("", alias="operatingSystem")
    control_plane: ControlPlaneSpec | None = Field(None, alias="controlPlane")

    def to_proto(self) -> Message:
        return cluster_pb2.MemberSpec(
            node_id=self.node_id,
            addresses=[_ip(a) for a in self.addresses],
            hostname=self.hostname,
            machine_type=_MACHINE_TYPES.get(self.machine_type, 0),  # type: ignore[arg-type]
            operating_system=self.operating_system,
            control_plane=cluster_pb2.ControlPlane(api_server_port=self.control_plane.api_server_port)
            if self.control_plane is not None
            else None,
        )


class ClusterInfoSpec(Spec):
    """``Infos.cluster.talos.dev`` (namespace ``cluster``, id ``current``): the cluster of the machine."""

    always_marshalled = frozenset({"cluster_id", "cluster_name"})

    cluster_id: str = Field("", alias="clusterId")
    cluster_name: str = Field("", alias="clusterName")

    def to_proto(self) -> Message:
        return cluster_pb2.InfoSpec(cluster_id=self.cluster_id, cluster_name=self.cluster_name)


class ServiceSpec(Spec):
    """``Services.v1alpha1.talos.dev`` (namespace ``runtime``, id: the service): whether it runs and is
    healthy."""

    always_marshalled = frozenset({"running", "healthy", "unknown"})

    running: bool = False
    healthy: bool = False
    unknown: bool = False

    def to_proto(self) -> Message:
        return v1alpha1_pb2.ServiceSpec(running=self.running, healthy=self.healthy, unknown=self.unknown)


class NetworkStatusSpec(Spec):
    """``NetworkStatuses.net.talos.dev`` (id ``status``): whether the network is ready."""

    always_marshalled = frozenset(
        {"address_ready", "connectivity_ready", "hostname_ready", "etc_files_ready"}
    )

    address_ready: bool = Field(False, alias="addressReady")
    connectivity_ready: bool = Field(False, alias="connectivityReady")
    hostname_ready: bool = Field(False, alias="hostnameReady")
    etc_files_ready: bool = Field(False, alias="etcFilesReady")

    def to_proto(self) -> Message:
        return network_pb2.StatusSpec(**self.model_dump())


class ResolverStatusSpec(Spec):
    """``ResolverStatuses.net.talos.dev`` (id ``resolvers``): the DNS servers in use."""

    always_marshalled = frozenset({"dns_servers", "search_domains"})

    dns_servers: tuple[str, ...] = Field((), alias="dnsServers")
    search_domains: tuple[str, ...] = Field((), alias="searchDomains")

    def to_proto(self) -> Message:
        return network_pb2.ResolverStatusSpec(
            dns_servers=[_ip(a) for a in self.dns_servers], search_domains=self.search_domains
        )


class TimeServerStatusSpec(Spec):
    """``TimeServerStatuses.net.talos.dev`` (id ``timeservers``): the NTP servers in use."""

    always_marshalled = frozenset({"ntp_servers", "use_nts"})

    ntp_servers: tuple[str, ...] = Field((), alias="timeServers")
    use_nts: bool = Field(False, alias="useNTS")

    def to_proto(self) -> Message:
        return network_pb2.TimeServerStatusSpec(ntp_servers=self.ntp_servers, use_nts=self.use_nts)


def _enum(enum: Any, prefix: str, text: str) -> int:
    return int(enum.Value(prefix + text.upper().replace("-", "_")))


class RouteStatusSpec(Spec):
    """``RouteStatuses.net.talos.dev`` (id: family/gateway/destination/table/priority): a kernel route."""

    always_marshalled = frozenset(
        {"family", "dst", "src", "gateway", "table", "priority", "scope", "type", "flags", "protocol"}
    )

    family: str = "inet4"
    dst: str = ""
    src: str = ""
    gateway: str = ""
    out_link_index: int = Field(0, alias="outLinkIndex")
    out_link_name: str = Field("", alias="outLinkName")
    table: str = "main"
    priority: int = 0
    scope: str = "global"
    type: str = "unicast"
    flags: str = ""
    protocol: str = "static"
    mtu: int = 0

    def to_proto(self) -> Message:
        return network_pb2.RouteStatusSpec(
            family=_enum(enums_pb2.NethelpersFamily, "FAMILY_", self.family),  # type: ignore[arg-type]
            destination=_prefix(self.dst),
            source=_ip(self.src),
            gateway=_ip(self.gateway),
            out_link_index=self.out_link_index,
            out_link_name=self.out_link_name,
            table=_enum(enums_pb2.NethelpersRoutingTable, "TABLE_", self.table),  # type: ignore[arg-type]
            priority=self.priority,
            scope=_enum(enums_pb2.NethelpersScope, "SCOPE_", self.scope),  # type: ignore[arg-type]
            type=_enum(enums_pb2.NethelpersRouteType, "TYPE_", self.type),  # type: ignore[arg-type]
            protocol=_enum(enums_pb2.NethelpersRouteProtocol, "PROTOCOL_", self.protocol),  # type: ignore[arg-type]
            mtu=self.mtu,
        )


_LINK_FLAGS = {
    "UP": 0x1,
    "BROADCAST": 0x2,
    "LOOPBACK": 0x8,
    "RUNNING": 0x40,
    "MULTICAST": 0x1000,
    "LOWER_UP": 0x10000,
}
_LINK_TYPES = {"ether": "LINK_ETHER", "loopback": "LINK_LOOPBCK", "netrom": "LINK_NETROM"}
_PORTS = {"TwistedPair": "TWISTED_PAIR", "Other": "OTHER", "None": "NONE", "Fibre": "FIBRE"}


def _mac(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", "")) if text else b""


class LinkStatusSpec(Spec):
    """``LinkStatuses.net.talos.dev`` (id: the link's name): a network link as the kernel reports it."""

    always_marshalled = frozenset(
        {"index", "type", "link_index", "flags", "hardware_addr", "permanent_addr", "broadcast_addr", "mtu",
         "queue_disc", "operational_state", "kind", "slave_kind", "link_state", "port", "duplex"}
    )  # fmt: skip

    index: int = 0
    type: str = "ether"
    link_index: int = Field(0, alias="linkIndex")
    flags: str = ""
    hardware_addr: str = Field("", alias="hardwareAddr")
    permanent_addr: str = Field("", alias="permanentAddr")
    broadcast_addr: str = Field("", alias="broadcastAddr")
    mtu: int = 0
    queue_disc: str = Field("", alias="queueDisc")
    operational_state: str = Field("unknown", alias="operationalState")
    kind: str = ""
    slave_kind: str = Field("", alias="slaveKind")
    driver: str = ""
    link_state: bool = Field(False, alias="linkState")
    port: str = "Other"
    duplex: str = "Unknown"

    def to_proto(self) -> Message:
        flags = 0
        for flag in filter(None, self.flags.split(",")):
            flags |= _LINK_FLAGS.get(flag, 0)
        state = "OPER_STATE_" + "".join("_" + c if c.isupper() else c.upper() for c in self.operational_state)
        return network_pb2.LinkStatusSpec(
            index=self.index,
            type=enums_pb2.NethelpersLinkType.Value(_LINK_TYPES.get(self.type, "LINK_ETHER")),
            link_index=self.link_index,
            flags=flags,
            hardware_addr=_mac(self.hardware_addr),
            permanent_addr=_mac(self.permanent_addr),
            broadcast_addr=_mac(self.broadcast_addr),
            mtu=self.mtu,
            queue_disc=self.queue_disc,
            operational_state=enums_pb2.NethelpersOperationalState.Value(state),
            kind=self.kind,
            slave_kind=self.slave_kind,
            driver=self.driver,
            link_state=self.link_state,
            port=enums_pb2.NethelpersPort.Value(_PORTS.get(self.port, "OTHER")),
            duplex=enums_pb2.NethelpersDuplex.Value(self.duplex.upper()),
        )


class VersionSpec(Spec):
    """``Versions.runtime.talos.dev`` (id ``version``): the Talos version the machine runs."""

    always_marshalled = frozenset({"version", "name"})

    version: str = ""
    name: str = ""

    def to_proto(self) -> Message:
        return runtime_pb2.VersionSpec(version=self.version, name=self.name)


class MachineTypeSpec(Spec):
    """``MachineTypes.config.talos.dev`` (namespace ``config``, id ``machine-type``): the type of the
    machine's config (``controlplane``, ``worker``; ``unknown`` in maintenance). Its YAML is the bare name."""

    machine_type: str = "unknown"

    def yaml_fields(self) -> dict[str, Any]:
        return {"machineType": self.machine_type}

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.machine_type)

    def to_proto(self) -> Message:
        return config_pb2.MachineTypeSpec(machine_type=_MACHINE_TYPES.get(self.machine_type, 0))  # type: ignore[arg-type]


class StaticPodStatusSpec(Spec):
    """``StaticPodStatuses.kubernetes.talos.dev`` (namespace ``k8s``, id: the pod's namespace/name): the
    pod's status as the kubelet reports it (its YAML is the status itself)."""

    pod_status: dict[str, Any] = {}

    def yaml_fields(self) -> dict[str, Any]:
        return dict(self.pod_status)

    def to_proto(self) -> Message:
        return k8s_pb2.StaticPodStatusSpec(pod_status=_struct(self.pod_status))


class KubeletSpecSpec(Spec):
    """``KubeletSpecs.kubernetes.talos.dev`` (namespace ``k8s``, id ``kubelet``): how the kubelet runs.
    Sensitive: only os:admin may read it."""

    always_marshalled = frozenset({"image", "config"})

    image: str = ""
    args: tuple[str, ...] = ()
    expected_nodename: str = Field("", alias="expectedNodename")
    config: dict[str, Any] = {}

    def to_proto(self) -> Message:
        return k8s_pb2.KubeletSpecSpec(
            image=self.image,
            args=self.args,
            expected_nodename=self.expected_nodename,
            config=_struct(self.config),
        )


class UnmetConditionSpec(Spec):
    always_marshalled = frozenset({"name", "reason"})

    name: str = ""
    reason: str = ""


class MachineStatusStatusSpec(Spec):
    always_marshalled = frozenset({"ready", "unmet_conditions"})

    ready: bool = False
    unmet_conditions: tuple[UnmetConditionSpec, ...] = Field((), alias="unmetConditions")


class MachineStatusSpec(Spec):
    """``MachineStatuses.runtime.talos.dev`` (id ``machine``): the stage (``booting``, ``running``, …) and
    whether the machine is ready in it, or why not."""

    always_marshalled = frozenset({"stage", "status"})

    stage: str = "unknown"
    status: MachineStatusStatusSpec = MachineStatusStatusSpec()

    @classmethod
    def of(
        cls, stage: MachineStage, ready: bool, unmet: tuple[tuple[str, str], ...] = ()
    ) -> MachineStatusSpec:
        conditions = tuple(UnmetConditionSpec(name=n, reason=r) for n, r in unmet)
        return cls(
            stage=stage_name(stage), status=MachineStatusStatusSpec(ready=ready, unmet_conditions=conditions)
        )

    @property
    def machine_stage(self) -> MachineStage:
        return MachineStage[self.stage.upper().replace(" ", "_")]

    def to_proto(self) -> Message:
        conditions = [
            runtime_pb2.UnmetCondition(name=c.name, reason=c.reason) for c in self.status.unmet_conditions
        ]
        return runtime_pb2.MachineStatusSpec(
            stage=enums_pb2.RuntimeMachineStage.Value(f"MACHINE_STAGE_{self.machine_stage.name}"),
            status=runtime_pb2.MachineStatusStatus(ready=self.status.ready, unmet_conditions=conditions),
        )


class ConstraintSpec(Spec):
    version: str = ""


class CompatibilitySpec(Spec):
    talos: ConstraintSpec = ConstraintSpec()


class ExtensionMetadataSpec(Spec):
    name: str = ""
    version: str = ""
    author: str = ""
    description: str = ""
    compatibility: CompatibilitySpec = CompatibilitySpec()


class ExtensionStatusSpec(Spec):
    """``ExtensionStatuses.runtime.talos.dev`` (id: its index, ``0``): a system extension the machine runs
    with. An Image Factory image has one named ``schematic`` whose version is its schematic ID."""

    always_marshalled = frozenset({"image", "metadata"})

    image: str = ""
    metadata: ExtensionMetadataSpec = ExtensionMetadataSpec()

    def to_proto(self) -> Message:
        meta = self.metadata
        return extensions_pb2.Layer(
            image=self.image,
            metadata=extensions_pb2.Metadata(
                name=meta.name,
                version=meta.version,
                author=meta.author,
                description=meta.description,
                compatibility=extensions_pb2.Compatibility(
                    talos=extensions_pb2.Constraint(version=meta.compatibility.talos.version)
                ),
            ),
        )


def stage_name(stage: MachineStage) -> str:
    """A stage as MachineStatuses write it (``shutting down``)."""
    return stage.name.lower().replace("_", " ")


class PrintColumn(Spec):
    always_marshalled = frozenset({"name", "json_path"})

    name: str = ""
    json_path: str = Field("", alias="jsonPath")


class ResourceDefinitionSpec(Spec):
    """``ResourceDefinitions.meta.cosi.dev`` (id: the type, lowercased): a resource type's names, default
    namespace, table columns and sensitivity."""

    always_marshalled = frozenset(
        {"type", "display_type", "default_namespace", "aliases", "all_aliases", "print_columns"}
    )

    type: str = ""
    display_type: str = Field("", alias="displayType")
    default_namespace: str = Field("", alias="defaultNamespace")
    aliases: tuple[str, ...] = ()
    all_aliases: tuple[str, ...] = Field((), alias="allAliases")
    skip_automatic_aliases: bool = Field(False, alias="skipAutomaticAliases")
    print_columns: tuple[PrintColumn, ...] = Field((), alias="printColumns")
    sensitivity: str = ""
    """Empty (non-sensitive) or ``sensitive`` (only os:admin may read such resources)."""

    def names(self) -> tuple[str, ...]:
        """Every name the type answers to: its id and all its aliases."""
        return (self.type.lower(), *self.all_aliases)

    def to_proto(self) -> Message:
        sensitivity = meta_pb2.ResourceDefinitionSpec.SENSITIVE if self.sensitivity else 0
        return meta_pb2.ResourceDefinitionSpec(
            resource_type=self.type,
            display_type=self.display_type,
            default_namespace=self.default_namespace,
            aliases=self.aliases,
            all_aliases=self.all_aliases,
            print_columns=[
                meta_pb2.ResourceDefinitionSpec.PrintColumn(name=c.name, json_path=c.json_path)
                for c in self.print_columns
            ],
            sensitivity=sensitivity,  # type: ignore[arg-type]
        )


class NamespaceSpec(Spec):
    """``Namespaces.meta.cosi.dev`` (id: the namespace)."""

    always_marshalled = frozenset({"description"})

    description: str = ""

    def to_proto(self) -> Message:
        return meta_pb2.NamespaceSpec(description=self.description)


@dataclass(frozen=True)
class ResourceKind:
    """A resource type as its definition declares it."""

    type: str
    namespace: str
    """Its default namespace."""
    spec: builtins.type[Spec]
    aliases: tuple[str, ...] = ()
    print_columns: tuple[tuple[str, str], ...] = ()
    """(name, JSONPath) of the columns ``talosctl get`` shows besides the id and version."""
    sensitive: bool = False
    """Only os:admin may read it."""

    def definition(self) -> ResourceDefinitionSpec:
        """Its ResourceDefinition, with the aliases COSI derives: the singular, the capitals' initials (and
        their plural), the plural with leading parts of the suffix."""
        name, _, suffix = self.type.partition(".")
        display = _singular(name)
        aliases = [*self.aliases, display.lower()]
        initials = "".join(c for c in name if c.isupper())
        if len(initials) > 1:
            aliases.append(initials.lower())
            if not initials.endswith("S"):
                aliases.append(initials.lower() + "s")
        parts = suffix.split(".")
        plural = [name.lower(), *(".".join([name.lower(), *parts[:i]]) for i in range(1, len(parts)))]
        return ResourceDefinitionSpec(
            type=self.type,
            display_type=display,
            default_namespace=self.namespace,
            aliases=tuple(aliases),
            all_aliases=(*plural, *aliases),
            print_columns=tuple(PrintColumn(name=n, json_path=p) for n, p in self.print_columns),
            sensitivity="sensitive" if self.sensitive else "",
        )


def _singular(plural: str) -> str:
    """The singular of a resource type's plural name (``Addresses`` → ``Address``, ``Disks`` → ``Disk``)."""
    if plural.endswith(("sses", "uses", "xes", "ches", "shes")):
        return plural[:-2]
    return plural.removesuffix("s")


KINDS: dict[str, ResourceKind] = {
    kind.type: kind
    for kind in (
        ResourceKind(
            RESOURCE_DEFINITION,
            META,
            ResourceDefinitionSpec,
            aliases=("api-resources",),
            print_columns=(("Aliases", "{.aliases[:]}"),),
        ),
        ResourceKind(NAMESPACE, META, NamespaceSpec, aliases=("ns",)),
        ResourceKind(
            SYSTEM_INFORMATION,
            HARDWARE,
            SystemInformationSpec,
            aliases=("systeminformation",),
            print_columns=(
                ("Manufacturer", "{.manufacturer}"),
                ("ProductName", "{.productName}"),
                ("Version", "{.version}"),
                ("SerialNumber", "{.serialnumber}"),
                ("UUID", "{.uuid}"),
                ("WakeUpType", "{.wakeUpType}"),
                ("SKUNumber", "{.skuNumber}"),
            ),
        ),
        ResourceKind(
            PROCESSOR,
            HARDWARE,
            ProcessorSpec,
            aliases=("cpus", "cpu"),
            print_columns=(
                ("Manufacturer", "{.manufacturer}"),
                ("Model", "{.productName}"),
                ("Cores", "{.coreCount}"),
                ("Threads", "{.threadCount}"),
            ),
        ),
        ResourceKind(
            MEMORY_MODULE,
            HARDWARE,
            MemoryModuleSpec,
            aliases=("memorymodules", "ram"),
            print_columns=(
                ("Manufacturer", "{.manufacturer}"),
                ("Model", "{.productName}"),
                ("SizeMiB", "{.sizeMiB}"),
            ),
        ),
        ResourceKind(
            DISK,
            RUNTIME,
            DiskSpec,
            print_columns=(
                ("Size", "{.pretty_size}"),
                ("Read Only", "{.readonly}"),
                ("Transport", "{.transport}"),
                ("Rotational", "{.rotational}"),
                ("WWID", "{.wwid}"),
                ("Model", "{.model}"),
                ("Serial", "{.serial}"),
            ),
        ),
        ResourceKind(
            NODE_ADDRESS,
            NETWORK,
            NodeAddressSpec,
            print_columns=(("Addresses", "{.addresses}"), ("SortAlgorithm", "{.sortAlgorithm}")),
        ),
        ResourceKind(
            HOSTNAME_STATUS,
            NETWORK,
            HostnameStatusSpec,
            aliases=("hostname",),
            print_columns=(("Hostname", "{.hostname}"), ("Domainname", "{.domainname}")),
        ),
        ResourceKind(
            MACHINE_STATUS,
            RUNTIME,
            MachineStatusSpec,
            print_columns=(("Stage", "{.stage}"), ("Ready", "{.status.ready}")),
        ),
        ResourceKind(
            MEMBER,
            CLUSTER,
            MemberSpec,
            print_columns=(
                ("Hostname", "{.hostname}"),
                ("Machine Type", "{.machineType}"),
                ("OS", "{.operatingSystem}"),
                ("Addresses", "{.addresses}"),
            ),
        ),
        ResourceKind(
            CLUSTER_INFO,
            CLUSTER,
            ClusterInfoSpec,
            print_columns=(("Cluster ID", "{.clusterId}"), ("Cluster Name", "{.clusterName}")),
        ),
        ResourceKind(
            SERVICE,
            RUNTIME,
            ServiceSpec,
            aliases=("svc",),
            print_columns=(
                ("Running", "{.running}"),
                ("Healthy", "{.healthy}"),
                ("Health Unknown", "{.unknown}"),
            ),
        ),
        ResourceKind(
            NETWORK_STATUS,
            NETWORK,
            NetworkStatusSpec,
            aliases=("netstatus", "netstatuses"),
            print_columns=(
                ("Address", "{.addressReady}"),
                ("Connectivity", "{.connectivityReady}"),
                ("Hostname", "{.hostnameReady}"),
                ("Etc", "{.etcFilesReady}"),
            ),
        ),
        ResourceKind(
            RESOLVER_STATUS,
            NETWORK,
            ResolverStatusSpec,
            aliases=("resolvers",),
            print_columns=(("Resolvers", "{.dnsServers}"), ("Search Domains", "{.searchDomains}")),
        ),
        ResourceKind(
            TIME_SERVER_STATUS,
            NETWORK,
            TimeServerStatusSpec,
            aliases=("timeserver", "timeservers"),
            print_columns=(("Timeservers", "{.timeServers}"), ("UseNTS", "{.useNTS}")),
        ),
        ResourceKind(
            ROUTE_STATUS,
            NETWORK,
            RouteStatusSpec,
            aliases=("route", "routes"),
            print_columns=(
                ("Destination", "{.dst}"),
                ("Gateway", "{.gateway}"),
                ("Link", "{.outLinkName}"),
                ("Metric", "{.priority}"),
            ),
        ),
        ResourceKind(
            LINK_STATUS,
            NETWORK,
            LinkStatusSpec,
            aliases=("link", "links"),
            print_columns=(
                ("Type", "{.type}"),
                ("Kind", "{.kind}"),
                ("Hw Addr", "{.hardwareAddr}"),
                ("Oper State", "{.operationalState}"),
                ("Link State", "{.linkState}"),
            ),
        ),
        ResourceKind(
            VERSION, RUNTIME, VersionSpec, print_columns=(("Name", "{.name}"), ("Version", "{.version}"))
        ),
        ResourceKind(
            EXTENSION_STATUS,
            RUNTIME,
            ExtensionStatusSpec,
            aliases=("extensions",),
            print_columns=(("Name", "{.metadata.name}"), ("Version", "{.metadata.version}")),
        ),
        ResourceKind(MACHINE_TYPE, CONFIG, MachineTypeSpec, print_columns=(("Type", "{@}"),)),
        ResourceKind(
            STATIC_POD_STATUS,
            K8S,
            StaticPodStatusSpec,
            aliases=("podstatus",),
            print_columns=(("Ready", '{.conditions[?(@.type=="Ready")].status}'),),
        ),
        ResourceKind(KUBELET_SPEC, K8S, KubeletSpecSpec, sensitive=True),
    )
}
"""The resource types herder reads, by type."""

NAMESPACES = {
    META: "Metadata namespace which contains resource and namespace definitions.",
    RUNTIME: "Talos v1alpha1 subsystems glue resources.",
    HARDWARE: "Hardware resources.",
    NETWORK: "Networking resources.",
    CLUSTER: "Cluster configuration and discovery resources.",
    CONFIG: "Talos node configuration.",
    K8S: "Kubernetes all node types resources.",
}
"""The namespaces of those types, with the descriptions Talos gives them."""


def pretty_size(size: int) -> str:
    """A size in bytes as Talos shows a disk's (decimal units: ``107 GB``)."""
    if size < 10:
        return f"{size} B"
    exponent = min(math.floor(math.log(size, 1000)), 6)
    value = math.floor(size / 1000**exponent * 10 + 0.5) / 10
    unit = ("B", "kB", "MB", "GB", "TB", "PB", "EB")[exponent]
    return f"{value:.0f} {unit}" if value >= 10 else f"{value:.1f} {unit}"


# --- the wire form ---


@dataclass(frozen=True)
class ResourceMetadata:
    namespace: str
    type: str
    id: str
    version: str = VERSION_UNDEFINED
    """The number of the resource's revision (``1`` when created), as a string; ``undefined`` for none."""
    owner: str = ""
    """The controller that manages it."""
    phase: str = PHASE_RUNNING
    created: datetime | None = None
    updated: datetime | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    finalizers: tuple[str, ...] = ()


S = TypeVar("S", bound=Spec)


@dataclass(frozen=True)
class TalosResource:
    metadata: ResourceMetadata
    spec: Any
    """The spec as decoded from its YAML (a mapping for every type herder knows)."""
    node: str = ""
    """The machine it was read from (the ``node`` the call targeted, else the endpoint)."""

    def typed(self, model: type[S]) -> S:
        """The spec as one of the typed specs (fields Talos adds later are ignored)."""
        return model.model_validate(self.spec or {})


class ResourceEventType(enum.IntEnum):
    CREATED = 0
    UPDATED = 1
    DESTROYED = 2
    BOOTSTRAPPED = 3
    """Every resource that existed when the watch started has been sent."""
    ERRORED = 4
    NOOP = 5


@dataclass(frozen=True)
class ResourceEvent:
    type: ResourceEventType
    resource: TalosResource | None
    """The resource after the change (for DESTROYED: as it was; for BOOTSTRAPPED: only its namespace and
    type)."""
    old: TalosResource | None = None
    """The resource before an update."""
    error: str = ""


def _timestamp(moment: datetime | None) -> Timestamp | None:
    if moment is None:
        return None
    stamp = Timestamp()
    stamp.FromDatetime(moment.astimezone(UTC))
    return stamp


def encode_resource(metadata: ResourceMetadata, spec: Spec | None) -> resource_pb2.Resource:
    """A resource as machined sends it (a resource that is gone, a tombstone, has an empty spec)."""
    return resource_pb2.Resource(
        metadata=resource_pb2.Metadata(
            namespace=metadata.namespace,
            type=metadata.type,
            id=metadata.id,
            version=metadata.version,
            owner=metadata.owner,
            phase=metadata.phase,
            created=_timestamp(metadata.created),
            updated=_timestamp(metadata.updated),
            finalizers=metadata.finalizers,
            labels=dict(metadata.labels),
            annotations=dict(metadata.annotations),
        ),
        spec=resource_pb2.Spec(
            proto_spec=spec.to_proto().SerializeToString() if spec is not None else b"",
            yaml_spec=spec.to_yaml() if spec is not None else "",
        ),
    )


def decode_resource(message: resource_pb2.Resource, node: str = "") -> TalosResource:
    md = message.metadata
    return TalosResource(
        metadata=ResourceMetadata(
            namespace=md.namespace,
            type=md.type,
            id=md.id,
            version=md.version,
            owner=md.owner,
            phase=md.phase,
            created=md.created.ToDatetime(UTC) if md.HasField("created") else None,
            updated=md.updated.ToDatetime(UTC) if md.HasField("updated") else None,
            labels=dict(md.labels),
            annotations=dict(md.annotations),
            finalizers=tuple(md.finalizers),
        ),
        spec=yaml.safe_load(message.spec.yaml_spec) if message.spec.yaml_spec else None,
        node=node,
    )
