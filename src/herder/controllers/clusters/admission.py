"""What the store refuses for the cluster kinds, whoever writes (422 naming the field, unless said):

- a Cluster whose versions the version policy refuses (unsupported contract, Kubernetes outside the Talos
  version's window, an upgrade path Talos or Kubernetes does not allow, below the creation minor), or
  whose disk encryption is switched after creation;
- a MachineSet without an existing cluster, a control plane set not named ``<cluster>-control-planes``,
  a changed role or cluster, a listed machine that is not registered or is in another set, an unknown
  class; the deletion of a live cluster's control plane set (409);
- a MachineSetNode for a machine that is not registered, a set that does not exist, or, by a user, for a
  set that allocates by itself;
- the deletion of a MachineClass that a MachineSet uses (409).
"""

from __future__ import annotations

from herder.controllers.clusters.machine_set_allocation import MachineSetAllocationController
from herder.resources import FieldError, InvalidObject, Resource
from herder.resources.clusters import (
    CLUSTER,
    MACHINE_SET,
    MACHINE_SET_NODE,
    ClusterSpec,
    ClusterStatus,
    MachineSetSpec,
    control_plane_set_name,
)
from herder.resources.machines import CLUSTER_LABEL, MACHINE, MACHINE_CLASS, MACHINE_SET_LABEL
from herder.resources.status import status_of
from herder.state.admission import Admission, Write
from herder.state.errors import Conflict, NotFound
from herder.state.store import SYSTEM, Store
from herder.talos.contracts import UnknownTalosVersion, VersionContract
from herder.talos.versions import check_compatibility, check_kubernetes_upgrade, check_talos_upgrade


def _invalid(obj: Resource, *causes: FieldError) -> InvalidObject:
    return InvalidObject(obj.kind, obj.name, list(causes))


class ClusterAdmission:
    def __init__(self, store: Store) -> None:
        self._store = store

    def register(self, admission: Admission) -> None:
        admission.register(CLUSTER.kind, self.cluster)
        admission.register(MACHINE_SET.kind, self.machine_set)
        admission.register(MACHINE_SET_NODE.kind, self.machine_set_node)
        admission.register(MACHINE_CLASS.kind, self.machine_class)

    async def _get(self, kind: str, name: str, namespace: str | None) -> Resource | None:
        try:
            return await self._store.get(kind, name, namespace)
        except NotFound:
            return None

    async def cluster(self, write: Write) -> None:
        new, old = write.new, write.old
        if new is None:
            return
        spec = CLUSTER.spec_of(new, ClusterSpec)
        try:
            VersionContract.parse(spec.talos_version)
        except UnknownTalosVersion as exc:
            raise _invalid(new, FieldError("spec.talosVersion", str(exc))) from None
        if old is None:
            verdict = check_compatibility(spec.talos_version, spec.kubernetes_version)
            if not verdict:
                raise _invalid(new, FieldError("spec.kubernetesVersion", verdict.reason))
            return
        before = CLUSTER.spec_of(old, ClusterSpec)
        if before.features.disk_encryption != spec.features.disk_encryption:
            raise _invalid(
                new, FieldError("spec.features.diskEncryption", "cannot be changed after creation")
            )
        if before.talos_version != spec.talos_version:
            initial = status_of(old, ClusterStatus).initial_talos_version or before.talos_version
            verdict = check_talos_upgrade(
                before.talos_version, spec.talos_version, initial=initial, kubernetes=spec.kubernetes_version
            )
            if not verdict:
                raise _invalid(new, FieldError("spec.talosVersion", verdict.reason))
        if before.kubernetes_version != spec.kubernetes_version:
            verdict = check_kubernetes_upgrade(
                before.kubernetes_version, spec.kubernetes_version, talos=[spec.talos_version]
            )
            if not verdict:
                raise _invalid(new, FieldError("spec.kubernetesVersion", verdict.reason))

    async def machine_set(self, write: Write) -> None:
        new, old = write.new, write.old
        if new is None:
            assert old is not None
            await self._deleting_set(write, old)
            return
        spec = MACHINE_SET.spec_of(new, MachineSetSpec)
        cluster_name = new.metadata.labels.get(CLUSTER_LABEL, "")
        if not cluster_name:
            raise _invalid(
                new, FieldError(f"metadata.labels.{CLUSTER_LABEL}", "is required", "FieldValueRequired")
            )
        if old is not None:
            before = MACHINE_SET.spec_of(old, MachineSetSpec)
            if old.metadata.labels.get(CLUSTER_LABEL) != cluster_name:
                raise _invalid(new, FieldError(f"metadata.labels.{CLUSTER_LABEL}", "cannot be changed"))
            if before.role != spec.role:
                raise _invalid(new, FieldError("spec.role", "cannot be changed"))
            if new.metadata.deletion_timestamp:
                return  # finalizers going: nothing else changes any more
        cluster = await self._get(CLUSTER.kind, cluster_name, new.namespace)
        if cluster is None:
            raise _invalid(
                new, FieldError(f"metadata.labels.{CLUSTER_LABEL}", f"cluster {cluster_name} does not exist")
            )
        if old is None and cluster.metadata.deletion_timestamp:
            raise _invalid(
                new,
                FieldError(f"metadata.labels.{CLUSTER_LABEL}", f"cluster {cluster_name} is being deleted"),
            )
        control_planes = control_plane_set_name(cluster_name)
        if spec.role == "controlplane" and new.name != control_planes:
            raise _invalid(
                new,
                FieldError(
                    "metadata.name",
                    f"the control plane set of cluster {cluster_name} is named {control_planes}; "
                    "a cluster has one control plane set",
                ),
            )
        if spec.role == "worker" and new.name == control_planes:
            raise _invalid(
                new, FieldError("spec.role", f"{control_planes} is the cluster's control plane set")
            )
        causes: list[FieldError] = []
        for i, uuid in enumerate(spec.machines or ()):
            where = f"spec.machines[{i}]"
            if await self._get(MACHINE.kind, uuid, new.namespace) is None:
                causes.append(FieldError(where, f"machine {uuid} is not registered"))
                continue
            node = await self._get(MACHINE_SET_NODE.kind, uuid, new.namespace)
            owner = node.metadata.labels.get(MACHINE_SET_LABEL) if node is not None else None
            if owner is not None and owner != new.name:
                causes.append(FieldError(where, f"machine {uuid} is already in machine set {owner}"))
        if spec.role == "controlplane" and spec.machines is not None and not spec.machines:
            causes.append(FieldError("spec.machines", "a control plane set needs at least one machine"))
        if spec.machine_class is not None:
            name = spec.machine_class.name
            if await self._get(MACHINE_CLASS.kind, name, new.namespace) is None:
                causes.append(FieldError("spec.machineClass.name", f"machine class {name} does not exist"))
            if spec.role == "controlplane" and spec.machine_class.size in ("unlimited", 0):
                causes.append(
                    FieldError("spec.machineClass.size", "a control plane set needs a count of at least 1")
                )
        if causes:
            raise _invalid(new, *causes)

    async def _deleting_set(self, write: Write, old: Resource) -> None:
        if write.actor == SYSTEM or MACHINE_SET.spec_of(old, MachineSetSpec).role != "controlplane":
            return
        cluster = await self._get(CLUSTER.kind, old.metadata.labels.get(CLUSTER_LABEL, ""), old.namespace)
        if cluster is not None and not cluster.metadata.deletion_timestamp:
            raise Conflict(
                f"machine set {old.name} holds the control planes of cluster {cluster.name}: "
                "delete the cluster to tear it down"
            )

    async def machine_set_node(self, write: Write) -> None:
        new = write.new
        if new is None or write.old is not None:
            return  # the binding itself never changes; only its finalizers and lock do
        if await self._get(MACHINE.kind, new.name, new.namespace) is None:
            raise _invalid(new, FieldError("metadata.name", f"machine {new.name} is not registered"))
        set_name = new.metadata.labels.get(MACHINE_SET_LABEL, "")
        machine_set = await self._get(MACHINE_SET.kind, set_name, new.namespace) if set_name else None
        if machine_set is None:
            raise _invalid(
                new,
                FieldError(
                    f"metadata.labels.{MACHINE_SET_LABEL}", f"machine set {set_name!r} does not exist"
                ),
            )
        cluster = machine_set.metadata.labels.get(CLUSTER_LABEL)
        if new.metadata.labels.get(CLUSTER_LABEL) != cluster:
            raise _invalid(
                new,
                FieldError(
                    f"metadata.labels.{CLUSTER_LABEL}", f"must be {cluster}, the cluster of {set_name}"
                ),
            )
        spec = MACHINE_SET.spec_of(machine_set, MachineSetSpec)
        by_hand = write.actor != MachineSetAllocationController.name
        if by_hand and (
            spec.machines is not None
            or spec.machine_class is not None
            or spec.machine_request_set is not None
        ):
            raise _invalid(
                new,
                FieldError(
                    f"metadata.labels.{MACHINE_SET_LABEL}",
                    f"machine set {set_name} allocates its machines itself: change its spec instead",
                ),
            )

    async def machine_class(self, write: Write) -> None:
        if write.new is not None or write.old is None:
            return
        old = write.old
        listed = await self._store.list(MACHINE_SET.kind, old.namespace)
        users = sorted(
            s.name
            for s in listed.items
            if (used := MACHINE_SET.spec_of(s, MachineSetSpec).machine_class) is not None
            and used.name == old.name
        )
        if users:
            raise Conflict(f"machine class {old.name} is used by machine set(s) {', '.join(users)}")
