"""Auto-provisioned machine sets: a MachineSet whose MachineClass has ``spec.autoProvision`` owns a
MachineRequestSet of the machine set's name, asking the class's provider for the set's size in machines
of the cluster's Talos version, with the class's provider data and kernel arguments and the cluster's
and the set's system extensions. The set then allocates only machines of that MachineRequestSet (see
``machine_set_allocation``); when it no longer uses such a class, the MachineRequestSet goes.
"""

from __future__ import annotations

from collections.abc import Iterable

from herder.controllers.members import cluster_changes
from herder.resources import InvalidObject, Resource
from herder.resources.access import HIDDEN_LABEL
from herder.resources.clusters import CLUSTER, MACHINE_SET, ClusterSpec, MachineSetSpec
from herder.resources.machines import CLUSTER_LABEL, MACHINE_CLASS, MACHINE_SET_LABEL, MachineClassSpec
from herder.resources.provisioning import MACHINE_REQUEST_SET, MachineRequestSetSpec, provider_data_object
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch, controller_owner
from herder.runtime.index import FieldIndex, LabelIndex
from herder.runtime.outputs import Owns
from herder.state.store import WatchEvent

_RETRY = 10.0


def _class_of(machine_set: Resource) -> str | None:
    """The class a machine set allocates from, if it does."""
    allocation = MACHINE_SET.spec_of(machine_set, MachineSetSpec).machine_class
    return allocation.name if allocation is not None else None


class MachineSetProvisioningController(Controller):
    name = "MachineSetProvisioning"
    primary = MACHINE_SET.kind
    outputs = (Owns(MACHINE_REQUEST_SET.kind),)
    concurrency = 2

    def __init__(self) -> None:
        self._sets = LabelIndex(MACHINE_SET.kind, CLUSTER_LABEL)
        # Which sets allocate from each class.
        self._users = FieldIndex(MACHINE_SET.kind, _class_of)
        self.watches = (
            Watch(MACHINE_SET.kind, self._set_changed),
            Watch(MACHINE_CLASS.kind, self._users.by_name()),
            Watch(CLUSTER.kind, cluster_changes(mapper=self._sets.by_name())),
            Watch(MACHINE_REQUEST_SET.kind, controller_owner(MACHINE_SET.kind)),
        )

    def _set_changed(self, event: WatchEvent) -> Iterable[ObjectKey]:
        self._users.update(event)
        return self._sets.track(event)

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        machine_set = await ctx.get(key)
        if machine_set is None or machine_set.metadata.deletion_timestamp:
            return None  # what it owns is garbage-collected after it
        wanted = await self._wanted(ctx, machine_set)
        current = await ctx.get(ObjectKey(MACHINE_REQUEST_SET.kind, key.namespace, key.name))
        mine = (
            current is not None
            and (ref := current.metadata.controller_ref()) is not None
            and (ref.uid == machine_set.metadata.uid)
        )
        if wanted is None:
            if mine:
                await ctx.delete(ObjectKey(MACHINE_REQUEST_SET.kind, key.namespace, key.name))
            return None
        if current is not None and not mine:
            await ctx.event(
                machine_set,
                "Warning",
                "MachineRequestSetTaken",
                f"a MachineRequestSet named {key.name} exists and is not this set's: rename one of them",
            )
            return None
        labels = current.metadata.labels if current is not None else {}
        if (
            mine
            and current is not None
            and current.spec == wanted.spec
            and (all(labels.get(k) == v for k, v in wanted.metadata.labels.items()))
        ):
            return None
        try:
            await ctx.apply_output(machine_set, wanted)
        except InvalidObject as exc:
            why = "; ".join(f"{c.field}: {c.message}" for c in exc.causes) or str(exc)
            await ctx.event(machine_set, "Warning", "ProvisioningRefused", why)
            return Result(requeue_after=_RETRY)
        return None

    async def _wanted(self, ctx: Context, machine_set: Resource) -> Resource | None:
        """The MachineRequestSet the set should own, or None when its class makes no machines."""
        spec = MACHINE_SET.spec_of(machine_set, MachineSetSpec)
        allocation = spec.machine_class
        if allocation is None or allocation.size == "unlimited":
            return None
        machine_class = await ctx.get(ObjectKey(MACHINE_CLASS.kind, machine_set.namespace, allocation.name))
        if machine_class is None:
            return None
        auto = MACHINE_CLASS.spec_of(machine_class, MachineClassSpec).auto_provision
        cluster_name = machine_set.metadata.labels.get(CLUSTER_LABEL, "")
        cluster = await ctx.get(ObjectKey(CLUSTER.kind, machine_set.namespace, cluster_name))
        if auto is None or cluster is None:
            return None
        cluster_spec = CLUSTER.spec_of(cluster, ClusterSpec)
        extensions = list(dict.fromkeys([*cluster_spec.system_extensions, *spec.system_extensions]))
        labels = {CLUSTER_LABEL: cluster_name, MACHINE_SET_LABEL: machine_set.name}
        if HIDDEN_LABEL in machine_set.metadata.labels:
            labels[HIDDEN_LABEL] = "true"
        return Resource.model_validate(
            {
                "apiVersion": MACHINE_REQUEST_SET.api_version,
                "kind": MACHINE_REQUEST_SET.kind,
                "metadata": {"name": machine_set.name, "namespace": machine_set.namespace, "labels": labels},
                "spec": MachineRequestSetSpec.model_validate(
                    {
                        "providerID": auto.provider_id,
                        "machineCount": allocation.size,
                        "talosVersion": cluster_spec.talos_version,
                        "providerData": provider_data_object(auto.provider_data),
                        "kernelArgs": auto.kernel_args,
                        "schematic": {"extensions": extensions},
                    }
                ).model_dump(mode="json", by_alias=True, exclude_none=True),
            }
        )
