"""A machine set's status: its machines (total, ready, wanted), its phase, and a ``Ready`` condition
whose message says what it waits for: machines it cannot get (from ``status.allocation``), or the first
of its machines that is not ready: why, when it is a fault; only its name while it is on its way."""

from __future__ import annotations

from herder.controllers.clusters.cluster_machine_readiness import waiting_for
from herder.controllers.members import labelled, request_set_count, request_set_sources, set_nodes
from herder.resources import Resource
from herder.resources.clusters import (
    CLUSTER_MACHINE,
    MACHINE_SET,
    MACHINE_SET_NODE,
    ClusterMachineStatus,
    ClusterPhase,
    MachineCounts,
    MachineSetSpec,
    MachineSetStatus,
)
from herder.resources.machines import MACHINE_SET_LABEL
from herder.resources.provisioning import MACHINE_REQUEST_SET
from herder.resources.status import status_of
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
    # A summary: its members change in bursts (a machine boots, installs, runs), each once a write. Longer
    # than the allocation's, so that it shows the allocation's verdict on the same burst, not a write before.
    settle = 1.0

    def __init__(self) -> None:
        self._sources = request_set_sources()
        self.watches = (
            Watch(MACHINE_SET.kind, self._sources.track),
            # A request set's machine count is what a set allocating from it wants.
            Watch(MACHINE_REQUEST_SET.kind, self._sources.by_name()),
            Watch(MACHINE_SET_NODE.kind, labelled_owner(MACHINE_SET.kind, MACHINE_SET_LABEL)),
            Watch(
                CLUSTER_MACHINE.kind,
                on_change(
                    labelled_owner(MACHINE_SET.kind, MACHINE_SET_LABEL),
                    "status.ready",
                    "status.conditions[Ready]",
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
        staying = [
            (m, status_of(m, ClusterMachineStatus)) for m in members if not m.metadata.deletion_timestamp
        ]
        ready = [m for m, status in staying if status.ready]
        spec = MACHINE_SET.spec_of(machine_set, MachineSetSpec)
        size = spec.machine_class.size if spec.machine_class is not None else None
        if spec.machines is not None:
            wanted = len(spec.machines)
        elif isinstance(size, int):
            wanted = size
        elif spec.machine_request_set:
            wanted = await request_set_count(ctx, machine_set) or 0
        else:
            wanted = sum(1 for n in nodes if not n.metadata.deletion_timestamp)
        allocation = status_of(machine_set, MachineSetStatus).allocation
        phase: ClusterPhase
        if machine_set.metadata.deletion_timestamp:
            phase, ok, reason = "Destroying", False, "Destroying"
            message = f"{len(members)} machine(s) leaving"
        elif allocation is not None and allocation.reason:
            phase, ok, reason, message = "ScalingUp", False, "MachinesMissing", allocation.reason
        elif len(members) > len(staying) or len(staying) > wanted:
            phase, ok, reason = "ScalingDown", False, "ScalingDown"
            message = f"{len(members) - len(staying)} machine(s) leaving"
        elif len(staying) < wanted:
            phase, ok, reason = "ScalingUp", False, "ScalingUp"
            message = f"{len(staying)}/{wanted} machines allocated"
        elif len(ready) < len(staying):
            phase, ok, reason = "Running", False, "MachinesNotReady"
            unready = [(m, status) for m, status in staying if not status.ready]
            message = f"{len(ready)}/{wanted} ready; {waiting_for(unready)}"
        else:
            phase, ok, reason, message = "Running", True, "Ready", f"{len(ready)}/{wanted} machines ready"
        counts = MachineCounts(total=len(staying), ready=len(ready), wanted=wanted)
        generation = machine_set.metadata.generation or 0
        now = ctx.clock.rfc3339()

        def record(_: Resource, status: MachineSetStatus) -> None:
            status.phase = phase
            status.machines = counts
            status.observed_generation = generation
            status.set_condition("Ready", ok, reason, message, now=now)

        await ctx.mutate_status(key, MachineSetStatus, record)
        return None
