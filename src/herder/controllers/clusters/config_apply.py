"""Config apply: each ClusterMachine's generated config is applied to its machine through the Talos API,
and again whenever the config changes; the ClusterMachine's status says where the machine stands.

A machine in maintenance mode gets its config without a client certificate (it then installs and boots
into the cluster); a configured one with herder's certificate from the cluster's Talos CA, in AUTO mode
(no reboot when none is needed). The applied config's hash is kept on ``status.configHash``. A failed
apply keeps its error and attempt count on ``status.apply`` (and in a Warning event) and is retried with
backoff until an attempt succeeds; nothing wipes the error before that.

A changed config rolls out: a locked machine gets no updates; a machine waiting for its Talos upgrade
gets its new config after it; control planes take theirs one at a time while etcd is healthy, and
workers as many at once as their set's ``updateStrategy`` allows, counting the machines that are not
ready or still rebooting for a config they were given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from herder.controllers.clusters.cluster_keys import ClusterKeys
from herder.controllers.clusters.members import cluster_of, labelled, machine_of
from herder.resources import Resource, now_micro, now_rfc3339
from herder.resources.clusters import (
    CLUSTER_MACHINE,
    CLUSTER_MACHINE_CONFIG,
    MACHINE_SET,
    MACHINE_SET_NODE,
    MachineSetSpec,
)
from herder.resources.machines import CLUSTER_LABEL, MACHINE, MACHINE_SET_LABEL, MachineSpec
from herder.resources.status import condition_true, find_condition, set_condition
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
from herder.state.store import WatchEvent
from herder.talos.machine import ApplyMode, MachineAPIError
from herder.talos.machine.pool import ClientPool

# Retries of a failed apply: doubling from a second, at most every five minutes.
_RETRY_FIRST, _RETRY_MAX = 1.0, 300.0
# How soon an update held back by its rollout looks for room again.
_ROLLOUT_WAIT = 2.0


def _machine_state(event: WatchEvent) -> Iterable[ObjectKey]:
    """A Machine's event matters to its member when what it reports (not its labels) changes."""
    before = event.previous
    if before is not None and before.status == event.object.status and before.spec == event.object.spec:
        return ()
    return same_name(CLUSTER_MACHINE.kind)(event)


class ConfigApplyController(Controller):
    name = "ConfigApply"
    primary = CLUSTER_MACHINE.kind
    outputs = (
        Writes(
            CLUSTER_MACHINE.kind,
            "status.apply",
            "status.configHash",
            "status.stage",
            "status.talosVersion",
            "status.ready",
            "status.conditions[Ready]",
        ),
    )
    concurrency = 8

    def __init__(self, keys: ClusterKeys, clients: ClientPool | None = None) -> None:
        self._keys = keys
        self._clients = clients or ClientPool(keep=32, timeout=30)
        self._locks: dict[str, asyncio.Lock] = {}
        self.watches = (
            Watch(
                CLUSTER_MACHINE.kind,
                on_change(
                    own_key,
                    "spec",
                    "status.etcdMember",
                    "status.upgrade",
                    "status.conditions",
                    "metadata.deletionTimestamp",
                ),
            ),
            Watch(CLUSTER_MACHINE_CONFIG.kind, controller_owner(CLUSTER_MACHINE.kind)),
            Watch(MACHINE.kind, _machine_state),
            Watch(MACHINE_SET_NODE.kind, same_name(CLUSTER_MACHINE.kind)),
        )

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        member = await ctx.get(key)
        if member is None or member.metadata.deletion_timestamp:
            return None
        machine = await machine_of(ctx, member)
        config = await ctx.get(ObjectKey(CLUSTER_MACHINE_CONFIG.kind, key.namespace, key.name))
        mstatus = (machine.status or {}) if machine is not None else {}
        status = member.status or {}
        wanted = (config.spec or {}).get("hash", "") if config is not None else ""
        applied = status.get("configHash", "")
        retry: float | None = None
        if wanted and wanted != applied and machine is not None and mstatus.get("connected"):
            assert config is not None
            if not applied:
                retry = await self._apply(ctx, member, machine, config)
            else:
                retry = await self._update(ctx, member, machine, config)
        role = str((member.spec or {}).get("role"))
        await ctx.mutate_status(key, lambda _, s: _observe(s, machine, wanted, role))
        return Result(requeue_after=retry) if retry is not None else None

    async def _update(
        self, ctx: Context, member: Resource, machine: Resource, config: Resource
    ) -> float | None:
        """Apply a changed config to a configured machine when its rollout lets it: not locked, not in the
        middle of a Talos upgrade, and (control planes one at a time behind a healthy etcd, workers by
        their set's ``updateStrategy``) without taking more machines down at once than allowed."""
        key = ObjectKey.of(member)
        node = await ctx.get(ObjectKey(MACHINE_SET_NODE.kind, key.namespace, key.name))
        if node is not None and (node.spec or {}).get("locked"):
            return None  # a locked machine gets no updates until it is unlocked (its node's event)
        upgrade = (member.status or {}).get("upgrade") or {}
        running = (machine.status or {}).get("talosVersion")
        if (member.spec or {}).get("talosVersion") != running or (upgrade and not upgrade.get("error")):
            return None  # upgraded first, updated after (the upgrade's events bring us back)
        scope = member.metadata.labels.get(MACHINE_SET_LABEL, "")
        async with self._rollout_lock(member):
            if not await self._room(ctx, member, scope):
                return _ROLLOUT_WAIT
            return await self._apply(ctx, member, machine, config)

    def _rollout_lock(self, member: Resource) -> asyncio.Lock:
        # Decisions of one set (or one cluster's control planes) are taken one at a time, so that two
        # members cannot both find room for the last place.
        role = (member.spec or {}).get("role")
        scope = (
            f"{member.namespace}/{member.metadata.labels.get(CLUSTER_LABEL)}/control-planes"
            if role == "controlplane"
            else f"{member.namespace}/{member.metadata.labels.get(MACHINE_SET_LABEL)}"
        )
        return self._locks.setdefault(scope, asyncio.Lock())

    async def _room(self, ctx: Context, member: Resource, set_name: str) -> bool:
        cluster = await cluster_of(ctx, member)
        if cluster is None:
            return False
        role = (member.spec or {}).get("role")
        if role == "controlplane":
            peers = [
                m
                for m in await labelled(
                    ctx, CLUSTER_MACHINE.kind, member.namespace, CLUSTER_LABEL, cluster.name
                )
                if (m.spec or {}).get("role") == "controlplane" and m.name != member.name
            ]
            allowed = 1
            if not condition_true(cluster.status, "EtcdHealthy"):
                return False
        else:
            peers = [
                m
                for m in await labelled(
                    ctx, CLUSTER_MACHINE.kind, member.namespace, MACHINE_SET_LABEL, set_name
                )
                if m.name != member.name
            ]
            machine_set = await ctx.get(ObjectKey(MACHINE_SET.kind, member.namespace, set_name))
            strategy = (
                MACHINE_SET.spec_of(machine_set, MachineSetSpec).update_strategy if machine_set else None
            )
            allowed = strategy.parallelism(len(peers) + 1) if strategy is not None else 1
        down = sum(1 for m in peers if _down(m))
        return down < allowed

    async def _apply(
        self, ctx: Context, member: Resource, machine: Resource, config: Resource
    ) -> float | None:
        """Apply the config; None on success, else how long to wait before trying again."""
        spec = config.spec or {}
        maintenance = bool((machine.status or {}).get("maintenance"))
        credentials = None
        if not maintenance:
            cluster = await cluster_of(ctx, member)
            view = await self._keys.of(cluster) if cluster is not None else None
            if view is None:
                return None
            credentials = view.talos
        endpoint = MACHINE.spec_of(machine, MachineSpec).endpoint
        try:
            async with self._clients.client(endpoint, credentials) as client:
                result = await client.apply_configuration(spec["config"], mode=ApplyMode.AUTO)
        except MachineAPIError as exc:
            error = str(exc)
            attempts = int(((member.status or {}).get("apply") or {}).get("attempts") or 0) + 1

            def failed(_: Resource, status: dict[str, Any]) -> None:
                status["apply"] = {
                    **(status.get("apply") or {}),
                    "attempts": attempts,
                    "lastError": error,
                    "lastErrorTime": now_rfc3339(),
                }

            await ctx.mutate_status(ObjectKey.of(member), failed)
            await ctx.event(member, "Warning", "ApplyFailed", f"attempt {attempts}: {error}")
            return float(min(_RETRY_FIRST * 2 ** (attempts - 1), _RETRY_MAX))
        digest = spec["hash"]
        rebooting = not maintenance and result.mode == ApplyMode.REBOOT

        def succeeded(_: Resource, status: dict[str, Any]) -> None:
            status["configHash"] = digest
            status["apply"] = {"attempts": 0, "appliedAt": now_micro(), "rebooting": rebooting}

        await ctx.mutate_status(ObjectKey.of(member), succeeded)
        how = "in maintenance mode" if maintenance else f"({result.mode.name.lower().replace('_', ' ')})"
        await ctx.event(member, "Normal", "ConfigApplied", f"config {digest[:12]} applied {how}")
        return None


def _down(member: Resource) -> bool:
    """Whether a member is out of service for a rollout: not running, or rebooting for its new config.
    (One that runs and merely waits for its own new config is in service.)"""
    status = member.status or {}
    return status.get("stage") != "Running" or bool((status.get("apply") or {}).get("rebooting"))


def _observe(status: dict[str, Any], machine: Resource | None, wanted: str, role: str) -> None:
    """The member's view of its machine: stage, version, readiness and why it is not ready."""
    mstatus = (machine.status or {}) if machine is not None else {}
    apply = status.get("apply") or {}
    if apply.get("rebooting") and str(mstatus.get("connectedAt") or "") > str(apply.get("appliedAt") or ""):
        status["apply"] = {**apply, "rebooting": False}  # it came back from the reboot its config asked
    stage = mstatus.get("stage", "Unknown") if machine is not None else "Unknown"
    status["stage"] = stage
    status["talosVersion"] = mstatus.get("talosVersion", "")
    conditions = list(status.get("conditions") or [])
    applied = status.get("configHash", "")
    reason, message = "Ready", ""
    valid = find_condition(conditions, "ConfigValid")
    apply_error = (status.get("apply") or {}).get("lastError", "")
    if machine is None:
        reason, message = "MachineMissing", "the machine is not registered"
    elif valid is not None and valid.get("status") == "False":
        reason, message = "InvalidConfig", str(valid.get("message", ""))
    elif not wanted:
        reason, message = "ConfigPending", "waiting for the machine's config to be generated"
    elif not mstatus.get("connected"):
        reason, message = (
            "Unreachable",
            f"machine is unreachable: {mstatus.get('lastError', '')}".rstrip(": "),
        )
    elif not applied or (apply_error and applied != wanted):
        # A machine that runs an older config is in service: only failing to get a config is a fault.
        reason = "ApplyFailed" if apply_error else "Applying"
        message = apply_error or "applying the machine's config"
    elif stage != "Running":
        reason, message = "NotRunning", f"machine is {stage.lower()}"
    elif role == "controlplane" and not status.get("etcdMember"):
        reason, message = "EtcdNotJoined", "waiting for the machine to join etcd"
    ready = reason == "Ready"
    status["ready"] = ready
    set_condition(conditions, "Ready", ready, reason, message)
    status["conditions"] = conditions
