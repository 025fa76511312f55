"""A cluster's status you can act on: its phase, its machines (total, ready, wanted), and the conditions
``ControlPlaneReady``, ``EtcdHealthy``, ``KubernetesAPIReady`` and ``Ready``, each with a reason and message.

It is recomputed whenever a member, a machine set or the cluster's ControlPlaneStatus (where etcd and the
Kubernetes API are measured) changes. A condition lost is told as a Warning; the cluster's steps to
ready (forming, or coming back) are its conditions' to tell, and only Ready is told once it holds.
"""

from __future__ import annotations

from herder.controllers.clusters.cluster_machine_readiness import waiting_for
from herder.controllers.members import (
    cluster_changes,
    cluster_machines,
    is_control_plane,
    machine_sets,
)
from herder.resources import Resource
from herder.resources.clusters import (
    CLUSTER,
    CLUSTER_MACHINE,
    MACHINE_SET,
    ClusterMachineStatus,
    ClusterPhase,
    ClusterStatus,
    MachineCounts,
    MachineSetSpec,
    MachineSetStatus,
)
from herder.resources.control_planes import CONTROL_PLANE_STATUS, ControlPlaneStatusStatus
from herder.resources.machines import CLUSTER_LABEL
from herder.resources.status import status_of
from herder.runtime.controller import (
    Context,
    Controller,
    ObjectKey,
    Result,
    Watch,
    labelled_owner,
    on_change,
    same_name,
)
from herder.runtime.outputs import Writes

_CONDITIONS = ("ControlPlaneReady", "EtcdHealthy", "KubernetesAPIReady", "Ready")
# A condition's verdict: whether it holds, its reason and its message.
Verdict = tuple[bool, str, str]


class ClusterStatusController(Controller):
    name = "ClusterStatus"
    primary = CLUSTER.kind
    outputs = (
        Writes(
            CLUSTER.kind,
            "status.phase",
            "status.machines",
            "status.observedGeneration",
            *(f"status.conditions[{kind}]" for kind in _CONDITIONS),
        ),
    )
    concurrency = 8
    # A summary: its members change in bursts (a machine boots, installs, runs), each once a write. Longer
    # than its sets' summary's, so that it reads their verdicts on the same burst, not a write before them.
    settle = 1.5

    def __init__(self) -> None:
        self.watches = (
            Watch(
                CLUSTER.kind,
                cluster_changes("bootstrap", "conditions[EndpointReady]", "rollouts", "teardown"),
            ),
            Watch(
                CLUSTER_MACHINE.kind,
                on_change(
                    labelled_owner(CLUSTER.kind, CLUSTER_LABEL),
                    "status.ready",
                    "status.conditions[Ready]",
                    "status.etcdMember",
                    "metadata.deletionTimestamp",
                ),
            ),
            Watch(MACHINE_SET.kind, labelled_owner(CLUSTER.kind, CLUSTER_LABEL)),
            Watch(CONTROL_PLANE_STATUS.kind, on_change(same_name(CLUSTER.kind), "status.conditions")),
        )

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        cluster = await ctx.get(key)
        if cluster is None:
            return None
        if cluster.metadata.deletion_timestamp:
            await self._destroying(ctx, cluster)
            return None
        before = status_of(cluster, ClusterStatus)
        sets = await machine_sets(ctx, cluster)
        members = await cluster_machines(ctx, cluster)
        staying = [
            (m, status_of(m, ClusterMachineStatus)) for m in members if not m.metadata.deletion_timestamp
        ]
        wanted = sum(_wanted(s) for s in sets if not s.metadata.deletion_timestamp)
        ready = sum(1 for _, status in staying if status.ready)
        phase, verdicts = await self._health(ctx, cluster, before, sets, staying, wanted, ready)
        if len(staying) < len(members) and phase != "Provisioning":
            phase = "ScalingDown"
        counts = MachineCounts(total=len(staying), ready=ready, wanted=wanted)
        generation = cluster.metadata.generation or 0
        now = ctx.clock.rfc3339()

        def record(_: Resource, current: ClusterStatus) -> None:
            current.phase = phase
            current.machines = counts
            current.observed_generation = generation
            for kind, (ok, reason, message) in verdicts.items():
                current.set_condition(kind, ok, reason, message, now=now)

        updated = await ctx.mutate_status(key, ClusterStatus, record)
        if updated is not None:
            await _tell_flips(ctx, updated, before)
        return None

    async def _destroying(self, ctx: Context, cluster: Resource) -> None:
        """A cluster being deleted is not ready, for what its teardown waits for."""
        now = ctx.clock.rfc3339()

        def record(_: Resource, status: ClusterStatus) -> None:
            status.phase = "Destroying"
            why = status.teardown or "tearing down the cluster's machines"
            status.set_condition("Ready", False, "Destroying", why, now=now)

        await ctx.mutate_status(ObjectKey.of(cluster), ClusterStatus, record)

    async def _health(
        self,
        ctx: Context,
        cluster: Resource,
        status: ClusterStatus,
        sets: list[Resource],
        members: list[tuple[Resource, ClusterMachineStatus]],
        wanted: int,
        ready: int,
    ) -> tuple[ClusterPhase, dict[str, Verdict]]:
        bootstrapped = status.bootstrapped
        control_planes = [(m, s) for m, s in members if is_control_plane(m)]
        cp_ready = [m for m, s in control_planes if s.ready]
        verdicts: dict[str, Verdict] = {}
        if not control_planes:
            verdicts["ControlPlaneReady"] = (
                False,
                "NoControlPlanes",
                "the cluster has no control plane machine",
            )
        elif len(cp_ready) < len(control_planes):
            unready = [(m, s) for m, s in control_planes if not s.ready]
            verdicts["ControlPlaneReady"] = (
                False,
                "ControlPlanesNotReady",
                f"{len(cp_ready)}/{len(control_planes)} ready; {waiting_for(unready)}",
            )
        else:
            verdicts["ControlPlaneReady"] = (True, "Ready", f"{len(control_planes)} control plane(s) ready")
        health = await ctx.get(ObjectKey(CONTROL_PLANE_STATUS.kind, cluster.namespace, cluster.name))
        checked = status_of(health, ControlPlaneStatusStatus) if health is not None else None
        served = status.condition("EndpointReady")
        for kind, source in (("EtcdHealthy", "EtcdHealthy"), ("KubernetesAPIReady", "APIReachable")):
            found = checked.condition(source) if bootstrapped and checked is not None else None
            if kind == "KubernetesAPIReady" and served is not None and served.status == "False":
                verdicts[kind] = (False, "NoEndpoint", served.message)
            elif found is None:
                verdicts[kind] = (False, "NotBootstrapped", "etcd is not bootstrapped yet")
            else:
                verdicts[kind] = (found.status == "True", found.reason, found.message)
        short = [s for s in sets if not status_of(s, MachineSetStatus).condition_true("Ready")]
        problems = [k for k in _CONDITIONS[:3] if not verdicts[k][0]]
        stopped = [r for r in status.rollouts if r.state == "Stopped"]
        if stopped and not problems:
            verdicts["Ready"] = (False, f"{stopped[0].kind}RolloutStopped", stopped[0].message)
        elif problems or short or ready < wanted:
            what = (
                verdicts[problems[0]][2]
                if problems
                else f"machine set {short[0].name} is not ready"
                if short
                else ""
            )
            verdicts["Ready"] = (
                False,
                problems[0] if problems else "MachinesNotReady",
                what or f"{ready}/{wanted} machines ready",
            )
        else:
            verdicts["Ready"] = (True, "Ready", f"{ready}/{wanted} machines ready")
        phase: ClusterPhase
        if not bootstrapped:
            phase = "Provisioning"
        elif len(members) < wanted:
            phase = "ScalingUp"
        else:
            phase = "Running"
        return phase, verdicts


def _wanted(machine_set: Resource) -> int:
    spec = MACHINE_SET.spec_of(machine_set, MachineSetSpec)
    if spec.machines is not None:
        return len(spec.machines)
    size = spec.machine_class.size if spec.machine_class is not None else None
    if isinstance(size, int):
        return size
    counted = status_of(machine_set, MachineSetStatus).machines
    if spec.machine_request_set and counted.wanted is not None:
        return counted.wanted  # its request set's machine count, as its status says
    return counted.total


async def _tell_flips(ctx: Context, cluster: Resource, before: ClusterStatus) -> None:
    after = status_of(cluster, ClusterStatus)
    for kind in _CONDITIONS:
        now, was = after.condition(kind), before.condition(kind)
        if now is None or now.status == "Unknown" or (was is not None and was.status == now.status):
            continue
        good = now.status == "True"
        if not good and was is None:
            continue  # a new cluster is not ready yet: nothing went wrong
        if good and kind != "Ready":
            # A step of a cluster forming (or coming back), which its condition tells: the Ready Event at
            # the end tells the whole, one Event rather than one per step.
            continue
        await ctx.event(
            cluster,
            "Normal" if good else "Warning",
            kind if good else f"{kind}Lost",
            now.message or now.reason,
        )
