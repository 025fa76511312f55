"""What the store refuses about restores, whoever writes (422 naming the field):

- a control plane set created with a ``spec.bootstrapSpec`` that names no EtcdBackup of its own
  namespace (a backup of another account is never found, and nothing says it exists);
- a ``spec.bootstrapSpec`` added to or changed on an existing set, or removed before the cluster is
  bootstrapped (after that it may go: a template applied again without it is fine).
"""

from __future__ import annotations

from herder.resources import FieldError, InvalidObject, Resource
from herder.resources.backups import ETCD_BACKUP
from herder.resources.clusters import CLUSTER, MACHINE_SET, ClusterStatus, MachineSetSpec
from herder.resources.machines import CLUSTER_LABEL
from herder.resources.status import status_of
from herder.state.admission import Admission, Write
from herder.state.errors import NotFound
from herder.state.store import Store

_FIELD = "spec.bootstrapSpec"


class RestoreAdmission:
    def __init__(self, store: Store) -> None:
        self._store = store

    def register(self, admission: Admission) -> None:
        admission.register(MACHINE_SET.kind, self.machine_set)

    async def machine_set(self, write: Write) -> None:
        new, old = write.new, write.old
        if new is None or new.metadata.deletion_timestamp:
            return
        spec = MACHINE_SET.spec_of(new, MachineSetSpec).bootstrap_spec
        before = MACHINE_SET.spec_of(old, MachineSetSpec).bootstrap_spec if old is not None else None
        if old is not None:
            if spec == before:
                return
            if spec is not None:
                raise _invalid(new, _FIELD, "can only be given when the control plane set is created")
            if not await self._bootstrapped(new):
                raise _invalid(new, _FIELD, "cannot be removed before the cluster is bootstrapped")
            return
        if spec is None:
            return
        listed = await self._store.list(
            ETCD_BACKUP,
            new.namespace,
            field_selector=f"spec.clusterUUID={spec.cluster_uuid},spec.snapshot={spec.snapshot}",
            limit=1,
        )
        if not listed.items:
            raise _invalid(
                new,
                f"{_FIELD}.snapshot",
                f"no backup {spec.snapshot!r} of cluster {spec.cluster_uuid} in namespace {new.namespace} "
                "(kubectl get etcdbackups -o wide lists them)",
            )

    async def _bootstrapped(self, machine_set: Resource) -> bool:
        try:
            cluster = await self._store.get(
                CLUSTER, machine_set.metadata.labels.get(CLUSTER_LABEL, ""), machine_set.namespace
            )
        except NotFound:
            return True  # the cluster is gone: nothing will bootstrap from it any more
        return status_of(cluster, ClusterStatus).bootstrapped


def _invalid(obj: Resource, field: str, message: str) -> InvalidObject:
    return InvalidObject(obj.kind, obj.name, [FieldError(field, message)])
