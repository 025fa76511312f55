"""What the store refuses for managed control planes, whoever writes (422 naming the field, 403 said):

- ``InfraProvider.spec.managedControlPlanes`` set, changed or removed (or its provider deleted) by anyone
  but Support or herder (403); an offering whose name another provider already offers, or a Talos
  version herder has no contract for;
- a Cluster asking for a managed control plane when the server does not offer them
  (``herder serve --managed-control-planes``), of an offering or a size that does not exist, of a Talos
  version off the offering's list; switched off, moved to another offering, or made managed after
  creation; a size of fewer machines than before; a Talos downgrade;
- by users (below Support): a write of the control plane MachineSet of a managed cluster (403), a machine
  set listing a read-only machine or allocating from a request set it cannot see, and a ConfigPatch
  that targets a read-only machine or a managed control plane set (403).
"""

from __future__ import annotations

from herder.controllers.managed.offerings import offered, provider_lookup
from herder.controllers.writers import writer_role
from herder.resources import FieldError, InvalidObject, Resource
from herder.resources.access import HIDDEN_LABEL, READ_ONLY_ANNOTATION
from herder.resources.clusters import (
    CLUSTER,
    MACHINE_SET,
    ClusterSpec,
    MachineSetSpec,
    ManagedControlPlane,
    control_plane_set_name,
)
from herder.resources.configuration import CONFIG_PATCH
from herder.resources.machines import (
    CLUSTER_LABEL,
    CLUSTER_MACHINE_LABEL,
    MACHINE,
    MACHINE_LABEL,
    MACHINE_SET_LABEL,
)
from herder.resources.managed import offering_name
from herder.resources.provisioning import INFRA_PROVIDER, MACHINE_REQUEST_SET, InfraProviderSpec
from herder.state.admission import Admission, Write
from herder.state.errors import Forbidden, NotFound
from herder.state.store import Store
from herder.talos.contracts import UnknownTalosVersion, VersionContract
from herder.talos.versions import Version

NOT_ENABLED = "managed control planes are not enabled on this server"
_MANAGED = "spec.controlPlane.managed"
_PLATFORM = (None, "Support")
"""Writers that are the platform: herder itself, and Support."""


def _invalid(obj: Resource, *causes: FieldError) -> InvalidObject:
    return InvalidObject(obj.kind, obj.name, list(causes))


class ManagedAdmission:
    def __init__(self, store: Store, *, enabled: bool) -> None:
        self._store = store
        self._enabled = enabled

    def register(self, admission: Admission) -> None:
        admission.register(INFRA_PROVIDER.kind, self.infra_provider)
        admission.register(CLUSTER.kind, self.cluster)
        admission.register(MACHINE_SET.kind, self.machine_set)
        admission.register(CONFIG_PATCH.kind, self.config_patch)

    async def _get(self, kind: str, name: str, namespace: str | None = None) -> Resource | None:
        try:
            return await self._store.get(kind, name, namespace)
        except NotFound:
            return None

    async def _by_user(self, write: Write) -> bool:
        return await writer_role(self._store, write.actor) not in _PLATFORM

    async def infra_provider(self, write: Write) -> None:
        new, old = write.new, write.old
        before = (old.spec or {}).get("managedControlPlanes") if old is not None else None
        after = (new.spec or {}).get("managedControlPlanes") if new is not None else None
        changed = before != after or (new is None and before is not None)
        if changed and await self._by_user(write):
            raise Forbidden(
                f"infraprovider {write.object.name}: spec.managedControlPlanes is the platform's: only "
                "Support may set, change or remove it (or delete a provider that offers managed control planes)"
            )
        if new is None or after is None or new.metadata.deletion_timestamp:
            return
        offer = INFRA_PROVIDER.spec_of(new, InfraProviderSpec).managed_control_planes
        assert offer is not None
        causes = []
        for i, version in enumerate(offer.talos_versions):
            try:
                VersionContract.parse(version)
            except UnknownTalosVersion as exc:
                causes.append(FieldError(f"spec.managedControlPlanes.talosVersions[{i}]", str(exc)))
        name = offering_name(new.name)
        found = await offered(provider_lookup(self._store), name)
        if found is not None and found[0].name != new.name:
            causes.append(
                FieldError(
                    "spec.managedControlPlanes",
                    f"managed control planes named {name!r} are already offered by another provider",
                )
            )
        if causes:
            raise _invalid(new, *causes)

    async def cluster(self, write: Write) -> None:
        new, old = write.new, write.old
        if new is None or new.metadata.deletion_timestamp:
            return
        spec = CLUSTER.spec_of(new, ClusterSpec)
        before = CLUSTER.spec_of(old, ClusterSpec) if old is not None else None
        was = before.managed if before is not None else None
        managed = spec.managed
        if was is not None and managed is None:
            raise _invalid(
                new,
                FieldError(
                    f"{_MANAGED}.enabled",
                    "a managed control plane cannot be switched off: the platform runs it for the cluster's "
                    "lifetime",
                ),
            )
        if managed is None:
            return
        if before is not None and was is None:
            raise _invalid(
                new,
                FieldError(
                    f"{_MANAGED}.enabled", "a cluster's control plane becomes managed only at creation"
                ),
            )
        if not self._enabled:
            raise _invalid(new, FieldError(f"{_MANAGED}.enabled", NOT_ENABLED))
        if was is not None and was.provider != managed.provider:
            raise _invalid(new, FieldError(f"{_MANAGED}.provider", "cannot be changed after creation"))
        await self._offering(new, spec, managed, before, was)

    async def _offering(
        self,
        new: Resource,
        spec: ClusterSpec,
        managed: ManagedControlPlane,
        before: ClusterSpec | None,
        was: ManagedControlPlane | None,
    ) -> None:
        found = await offered(provider_lookup(self._store), managed.provider)
        if found is None:
            raise _invalid(
                new,
                FieldError(
                    f"{_MANAGED}.provider",
                    f"no managed control planes are offered as {managed.provider!r} "
                    "(kubectl get managedcontrolplaneofferings)",
                ),
            )
        _, offer = found
        size = offer.sizes.get(managed.size)
        if size is None:
            raise _invalid(
                new,
                FieldError(
                    f"{_MANAGED}.size",
                    f"size {managed.size!r} is not offered by {managed.provider}: offered are "
                    + ", ".join(offer.sizes),
                ),
            )
        if was is not None and was.size != managed.size:
            previous = offer.sizes.get(was.size)
            if previous is not None and previous.machines > size.machines:
                raise _invalid(
                    new,
                    FieldError(
                        f"{_MANAGED}.size",
                        f"a managed control plane grows and never shrinks: size {was.size} has "
                        f"{previous.machines} machine(s), {managed.size} only {size.machines}",
                    ),
                )
        if before is not None and before.talos_version == spec.talos_version:
            return  # versions checked when they were chosen: a later offer does not undo them
        if spec.talos_version not in offer.talos_versions:
            raise _invalid(
                new,
                FieldError(
                    "spec.talosVersion",
                    f"Talos {spec.talos_version} is not offered for managed control planes by "
                    f"{managed.provider}: allowed are {', '.join(offer.talos_versions)}",
                ),
            )
        if before is not None and Version.parse(spec.talos_version) < Version.parse(before.talos_version):
            raise _invalid(
                new,
                FieldError(
                    "spec.talosVersion",
                    f"a cluster with a managed control plane is never downgraded: it runs "
                    f"{before.talos_version}, {spec.talos_version} is older",
                ),
            )

    async def _managed_cluster(self, name: str, namespace: str | None) -> Resource | None:
        cluster = await self._get(CLUSTER.kind, name, namespace) if name else None
        if cluster is None or CLUSTER.spec_of(cluster, ClusterSpec).managed is None:
            return None
        return cluster

    async def machine_set(self, write: Write) -> None:
        obj = write.object
        if not await self._by_user(write):
            return
        cluster_name = obj.metadata.labels.get(CLUSTER_LABEL, "")
        control_planes = (
            obj.name == control_plane_set_name(cluster_name) or (obj.spec or {}).get("role") == "controlplane"
        )
        if control_planes and await self._managed_cluster(cluster_name, obj.namespace) is not None:
            raise Forbidden(
                f"machinesets {obj.name!r}: the control planes of cluster {cluster_name} are managed by the "
                "platform: nobody may create, change or delete their machine set"
            )
        new = write.new
        if new is None or new.metadata.deletion_timestamp:
            return
        spec = MACHINE_SET.spec_of(new, MachineSetSpec)
        causes = []
        for i, uuid in enumerate(spec.machines or ()):
            machine = await self._get(MACHINE.kind, uuid, new.namespace)
            if machine is not None and READ_ONLY_ANNOTATION in machine.metadata.annotations:
                causes.append(
                    FieldError(f"spec.machines[{i}]", f"machine {uuid} is read-only, managed by the platform")
                )
        if spec.machine_request_set is not None:
            source = await self._get(MACHINE_REQUEST_SET.kind, spec.machine_request_set, new.namespace)
            if source is None or HIDDEN_LABEL in source.metadata.labels:
                causes.append(
                    FieldError(
                        "spec.machineRequestSet",
                        f"machine request set {spec.machine_request_set!r} does not exist",
                    )
                )
        if causes:
            raise _invalid(new, *causes)

    async def config_patch(self, write: Write) -> None:
        new = write.new
        if new is None or new.metadata.deletion_timestamp:
            return
        labels = new.metadata.labels
        targets = [labels[label] for label in (MACHINE_LABEL, CLUSTER_MACHINE_LABEL) if label in labels]
        set_name = labels.get(MACHINE_SET_LABEL, "")
        if not targets and not set_name:
            return
        if await writer_role(self._store, write.actor) in (*_PLATFORM, "InfraProvider"):
            return  # the platform's own patches, and a provider's for the machines of its requests
        for uuid in targets:
            machine = await self._get(MACHINE.kind, uuid, new.namespace)
            if machine is not None and READ_ONLY_ANNOTATION in machine.metadata.annotations:
                raise Forbidden(
                    f"configpatches {new.name!r}: machine {uuid} is read-only, managed by the platform: "
                    "no config patch may target it"
                )
        cluster_name = labels.get(CLUSTER_LABEL, "")
        managed_set = bool(set_name) and set_name == control_plane_set_name(cluster_name)
        if managed_set and await self._managed_cluster(cluster_name, new.namespace) is not None:
            raise Forbidden(
                f"configpatches {new.name!r}: the control planes of cluster {cluster_name} are managed by the "
                "platform: no config patch may target them"
            )
