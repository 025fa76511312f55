"""Readiness: each ClusterMachine says what its machine is doing (its stage and the Talos version it runs)
and whether it is ready, with a ``Ready`` condition whose reason and message say what it waits for.

A member is ready once its machine is registered and reachable, runs the config herder applied to it
(an older one counts: it is in service while its new config rolls out), and, for a control plane, is an
etcd member. Only the config that cannot be made (``ConfigValid``) or applied (``status.apply``) is a
fault; the rest is progress. A new member usually gets its config and comes up within seconds: it tells
its progress only when that takes longer (``PENDING_GRACE``), and a fault at once.
"""

from __future__ import annotations

from herder.controllers.members import machine_of
from herder.resources import Resource
from herder.resources.clusters import (
    CLUSTER_MACHINE,
    CLUSTER_MACHINE_CONFIG,
    ClusterMachineConfigSpec,
    ClusterMachineSpec,
    ClusterMachineStatus,
)
from herder.resources.machines import MACHINE, MachineStatus
from herder.resources.status import status_of
from herder.runtime.controller import (
    Context,
    Controller,
    ObjectKey,
    Result,
    Watch,
    controller_owner,
    on_change,
    own_key,
    same_name,
)
from herder.runtime.outputs import Writes

# The progress a new member's first verdict waits out, within its grace: its config being made and applied,
# its machine installing it and booting. A control plane's waiting for etcd is told at once: its machine
# running is what its cluster's bootstrap waits for (and is woken by).
_COMING_UP = ("ConfigPending", "NotRunning")

PENDING_GRACE = 30.0
"""Seconds a new member may take to get its config and come up before its readiness tells how far it got
(it has no Ready condition meanwhile): usually it is up by then, even with a hundred machines forming at
once, and the first word a member gets is then one write (Ready), not one per step."""


class ClusterMachineReadinessController(Controller):
    name = "ClusterMachineReadiness"
    primary = CLUSTER_MACHINE.kind
    outputs = (
        Writes(
            CLUSTER_MACHINE.kind,
            "status.stage",
            "status.talosVersion",
            "status.ready",
            "status.conditions[Ready]",
        ),
    )
    concurrency = 8
    # A machine's stages follow each other closely as it installs its config and reboots: the one that
    # stands is written, not each (and each would be a write of the member and a reconcile of all above).
    settle = 1.0
    # What a verdict reads, and none of what it writes: a write does not wake it again.
    watches = (
        Watch(
            CLUSTER_MACHINE.kind,
            on_change(
                own_key,
                "spec.role",
                "status.configHash",
                "status.apply.lastError",
                "status.etcdMember",
                "status.conditions[ConfigValid]",
                "metadata.deletionTimestamp",
            ),
        ),
        Watch(CLUSTER_MACHINE_CONFIG.kind, on_change(controller_owner(CLUSTER_MACHINE.kind), "spec.hash")),
        Watch(
            MACHINE.kind,
            on_change(
                same_name(CLUSTER_MACHINE.kind),
                "status.connected",
                "status.stage",
                "status.talosVersion",
                "status.lastError",
            ),
        ),
    )

    def __init__(self) -> None:
        # New members waiting for their first config, since when (the clock's monotonic seconds).
        self._pending_since: dict[ObjectKey, float] = {}

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        member = await ctx.get(key)
        if member is None or member.metadata.deletion_timestamp:
            self._pending_since.pop(key, None)
            return None
        machine = await machine_of(ctx, member)
        reached = status_of(machine, MachineStatus) if machine is not None else None
        config = await ctx.get(ObjectKey(CLUSTER_MACHINE_CONFIG.kind, key.namespace, key.name))
        wanted = CLUSTER_MACHINE_CONFIG.spec_of(config, ClusterMachineConfigSpec).hash if config else ""
        role = CLUSTER_MACHINE.spec_of(member, ClusterMachineSpec).role
        current = status_of(member, ClusterMachineStatus)
        reason, message = verdict(current, reached, wanted, role)
        if reason in _COMING_UP and current.condition("Ready") is None:
            since = self._pending_since.setdefault(key, ctx.clock.monotonic())
            wait = PENDING_GRACE - (ctx.clock.monotonic() - since)
            if wait > 0:
                return Result(requeue_after=wait)
        self._pending_since.pop(key, None)
        now = ctx.clock.rfc3339()

        def record(_: Resource, status: ClusterMachineStatus) -> None:
            status.stage = reached.stage if reached is not None else "Unknown"
            status.talos_version = reached.talos_version if reached is not None else ""
            status.ready = reason == "Ready"
            status.set_condition("Ready", status.ready, reason, message, now=now)

        await ctx.mutate_status(key, ClusterMachineStatus, record)
        return None


# The reasons a member on its way to ready gives (the rest are faults): its config being made and applied,
# its machine booting, installing or upgrading, a control plane joining etcd.
PROGRESS = frozenset({"ConfigPending", "NotRunning", "EtcdNotJoined"})


def waiting_for(unready: list[tuple[Resource, ClusterMachineStatus]]) -> str:
    """What a summary (a set's, a cluster's) tells of its members not ready: the first fault with its
    message, else the first member on its way, by name only. Its steps are its own Ready condition's to
    tell: repeated, each would be a write of every summary above it too."""
    for member, status in unready:
        why = status.condition("Ready")
        if why is not None and why.status == "False" and why.reason not in PROGRESS:
            return f"{member.name}: {why.message or why.reason}"
    return f"{unready[0][0].name}: on its way (its ClusterMachine's Ready condition says how far)"


def verdict(
    status: ClusterMachineStatus, machine: MachineStatus | None, wanted: str, role: str
) -> tuple[str, str]:
    """Why a member is not ready (reason, message), or ``("Ready", "")``; ``wanted`` is the hash of its
    generated config ('' while there is none)."""
    applied = status.config_hash
    valid = status.condition("ConfigValid")
    apply_error = status.apply.last_error
    if machine is None:
        return "MachineMissing", "the machine is not registered"
    if valid is not None and valid.status == "False":
        return "InvalidConfig", valid.message
    if not machine.connected:
        return "Unreachable", f"machine is unreachable: {machine.last_error}".rstrip(": ")
    if apply_error and applied != wanted:
        # A machine that runs an older config is in service: only failing to get a config is a fault.
        return "ApplyFailed", apply_error
    if not applied:
        # One reason while it is made and while it is applied (a moment later): no write between them.
        return "ConfigPending", "waiting for the machine's config to be generated and applied"
    if machine.stage != "Running":
        return "NotRunning", f"machine is {machine.stage.lower()}"
    if role == "controlplane" and not status.etcd_member:
        return "EtcdNotJoined", "waiting for the machine to join etcd"
    return "Ready", ""
