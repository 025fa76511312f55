"""A machine set's status: its machines (total, ready, wanted), its phase, and a ``Ready`` condition
whose message says what it waits for: machines it cannot get (from ``status.allocation``), or the first
of its machines that is not ready, and why."""

from __future__ import annotations

from typing import Any

from herder.controllers.clusters.members import RequestSetSources, labelled, request_set_count, set_nodes
from herder.resources import Resource
from herder.resources.clusters import CLUSTER_MACHINE, MACHINE_SET, MACHINE_SET_NODE
from herder.resources.machines import MACHINE_SET_LABEL
from herder.resources.provisioning import MACHINE_REQUEST_SET
from herder.resources.status import find_condition, set_condition
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch, labelled_owner, on_change
from herder.runtime.outputs import Writes


class MachineSetStatusController(Controller):
    name = "MachineSetStatus"
    primary = MACHINE_SET.kind
    outputs = (
        Writes(
            MACHINE_SET.kind,
            "status.phase",
            "status.machines",
            "status.observedGeneration",
            "status.conditions[Ready]",
        ),
    )
    concurrency = 4

    def __init__(self) -> None:
        self._sources = RequestSetSources()
        self.watches = (
            Watch(MACHINE_SET.kind, self._sources.track),
            # A request set's machine count is what a set allocating from it wants.
            Watch(MACHINE_REQUEST_SET.kind, self._sources.users),
            Watch(MACHINE_SET_NODE.kind, labelled_owner(MACHINE_SET.kind, MACHINE_SET_LABEL)),
            Watch(
                CLUSTER_MACHINE.kind,
                on_change(
                    labelled_owner(MACHINE_SET.kind, MACHINE_SET_LABEL),
                    "status.ready",
                    "status.conditions",
                    "metadata.deletionTimestamp",
                ),
            ),
        )

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        machine_set = await ctx.get(key)
        if machine_set is None:
            return None
        nodes = await set_nodes(ctx, machine_set)
        members = await labelled(ctx, CLUSTER_MACHINE.kind, key.namespace, MACHINE_SET_LABEL, key.name)
        staying = [m for m in members if not m.metadata.deletion_timestamp]
        ready = [m for m in staying if (m.status or {}).get("ready")]
        spec = machine_set.spec or {}
        size = (spec.get("machineClass") or {}).get("size")
        live_nodes = [n for n in nodes if not n.metadata.deletion_timestamp]
        if spec.get("machines") is not None:
            wanted = len(spec["machines"])
        elif isinstance(size, int):
            wanted = size
        elif spec.get("machineRequestSet"):
            wanted = await request_set_count(ctx, machine_set) or 0
        else:
            wanted = len(live_nodes)
        allocation = (machine_set.status or {}).get("allocation") or {}
        if machine_set.metadata.deletion_timestamp:
            phase, ok, reason, message = (
                "Destroying",
                False,
                "Destroying",
                f"{len(members)} machine(s) leaving",
            )
        elif allocation.get("reason"):
            phase, ok, reason, message = "ScalingUp", False, "MachinesMissing", str(allocation["reason"])
        elif len(members) > len(staying) or len(staying) > wanted:
            phase, ok, reason, message = (
                "ScalingDown",
                False,
                "ScalingDown",
                f"{len(members) - len(staying)} machine(s) leaving",
            )
        elif len(staying) < wanted:
            phase, ok, reason, message = (
                "ScalingUp",
                False,
                "ScalingUp",
                f"{len(staying)}/{wanted} machines allocated",
            )
        elif len(ready) < len(staying):
            first = next(m for m in staying if not (m.status or {}).get("ready"))
            why = find_condition((first.status or {}).get("conditions"), "Ready") or {}
            phase, ok, reason = "Running", False, "MachinesNotReady"
            message = f"{len(ready)}/{wanted} ready; {first.name}: {why.get('message') or 'not ready'}"
        else:
            phase, ok, reason, message = "Running", True, "Ready", f"{len(ready)}/{wanted} machines ready"

        def record(_: Resource, status: dict[str, Any]) -> None:
            status["phase"] = phase
            status["machines"] = {"total": len(staying), "ready": len(ready), "wanted": wanted}
            status["observedGeneration"] = machine_set.metadata.generation or 0
            conditions = list(status.get("conditions") or [])
            set_condition(conditions, "Ready", ok, reason, message)
            status["conditions"] = conditions

        await ctx.mutate_status(key, record)
        return None
