"""Carrying out a template's plan against the server: writes in dependency order (the Cluster, its patches,
its machine sets), then the state of machine set nodes once their sets' allocation made them, then
deletions (machine sets first, waited for while their machines are torn down, then patches). Waits show
what they wait for; a write the server refuses stops the sync with the server's reason."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from herder.cli.errors import UsageFailure
from herder.cli.watching import Watched
from herder.client import Client, Conflict, NotFound
from herder.resources import Resource
from herder.resources.clusters import CLUSTER, CLUSTER_MACHINE, MACHINE_SET, MACHINE_SET_NODE
from herder.resources.configuration import CONFIG_PATCH
from herder.resources.machines import CLUSTER_LABEL, MACHINE_SET_LABEL
from herder.resources.manifests import MANIFEST_KINDS
from herder.templates import CheckedTemplate
from herder.templates.plan import Change, Plan, merged, owned_view, plan, same_binding, template_objects

Say = Callable[[str], None]
_KINDS = {info.kind: info for info in (CLUSTER, MACHINE_SET, MACHINE_SET_NODE, CONFIG_PATCH, *MANIFEST_KINDS)}
_UPDATE_ATTEMPTS = 5


async def live_objects(client: Client, cluster: str, namespace: str) -> list[Resource]:
    """The Cluster (if it exists) and every MachineSet, MachineSetNode, ConfigPatch, ClusterManifest and
    ClusterHealthCheck labelled with it."""
    out: list[Resource] = []
    with contextlib.suppress(NotFound):
        out.append(await client.get(CLUSTER, cluster, namespace))
    selector = f"{CLUSTER_LABEL}={cluster}"
    for info in (MACHINE_SET, MACHINE_SET_NODE, CONFIG_PATCH, *MANIFEST_KINDS):
        out += (await client.list(info, namespace, label_selector=selector)).items
    return out


async def plan_for(client: Client, checked: CheckedTemplate, namespace: str) -> Plan:
    """What syncing the template would change now."""
    name = checked.cluster_name
    desired = checked.objects()
    owned = template_objects(name, await live_objects(client, name, namespace))
    have = {(o.kind, o.name) for o in owned}
    taken = []
    for obj in desired:
        if obj.kind != MACHINE_SET_NODE.kind and (obj.kind, obj.name) not in have:
            with contextlib.suppress(NotFound):
                taken.append(await client.get(_KINDS[obj.kind], obj.name, namespace))
    return plan(name, desired, owned, taken)


async def sync(
    client: Client, checked: CheckedTemplate, namespace: str, timeout: float, say: Say, progress: Say
) -> None:
    current = await plan_for(client, checked, namespace)
    if current.conflicts:
        raise UsageFailure("\n".join(current.conflicts))
    name = checked.cluster_name
    if current.in_sync:
        say(f"cluster {name}: no changes")
        return
    for change in current.writes:
        await _write(client, change)
        say(f"{change.action}d {change.kind.lower()}/{change.name}")
    if current.pending_nodes:
        await _set_nodes(client, name, namespace, current.pending_nodes, timeout, say, progress)
    deleting = current.deletes
    sets = [c for c in deleting if c.kind == MACHINE_SET.kind]
    for change in sets:
        await client.delete(MACHINE_SET, change.name, namespace)
        say(f"deleted machineset/{change.name} (tearing down its machines)")
    if sets:
        await _sets_gone(client, name, namespace, {c.name for c in sets}, timeout, progress)
    for change in deleting:
        if change.kind != MACHINE_SET.kind:
            with contextlib.suppress(NotFound):
                await client.delete(_KINDS[change.kind], change.name, namespace)
            say(f"deleted {change.kind.lower()}/{change.name}")


async def _write(client: Client, change: Change) -> None:
    assert change.write is not None
    if change.action == "create":
        await client.create(change.write)
        return
    desired = change.write
    for attempt in range(_UPDATE_ATTEMPTS):
        try:
            await client.update(desired)
            return
        except Conflict:
            if attempt == _UPDATE_ATTEMPTS - 1:
                raise
            # Someone else (a controller adding its finalizer, say) wrote first: redo on the newest.
            fresh = await client.get(_KINDS[change.kind], change.name, change.write.namespace)
            desired = merged(fresh, desired)


async def _set_nodes(
    client: Client,
    cluster: str,
    namespace: str,
    nodes: list[Resource],
    timeout: float,
    say: Say,
    progress: Say,
) -> None:
    """Wait for the allocation to make each node, then give it the template's state."""
    selector = f"{CLUSTER_LABEL}={cluster}"
    async with (
        Watched(client, namespace)
        .follow(MACHINE_SET_NODE, labels=selector)
        .follow(MACHINE_SET, labels=selector) as watched
    ):
        last = ""

        def missing() -> list[str]:
            return sorted(n.name for n in nodes if not same_binding(watched.get(MACHINE_SET_NODE, n.name), n))

        def report() -> None:
            nonlocal last
            waiting = missing()
            if not waiting:
                return
            reasons = sorted(
                {
                    str(((s.status or {}).get("allocation") or {}).get("reason") or "")
                    for s in watched.of(MACHINE_SET)
                }
                - {""}
            )
            line = f"waiting for machine(s) {', '.join(waiting)} to be allocated" + (
                f": {'; '.join(reasons)}" if reasons else ""
            )
            if line != last:
                progress(line)
                last = line

        arrived = await watched.until(lambda: not missing(), timeout, report)
        if not arrived:
            raise UsageFailure(f"timed out after {timeout:g}s: {last}")
        for node in nodes:
            live = watched.get(MACHINE_SET_NODE, node.name)
            assert live is not None
            if owned_view(live) != owned_view(node):
                await _write(client, Change("update", node.kind, node.name, merged(live, node), live))
                say(f"updated machinesetnode/{node.name}")


async def _sets_gone(
    client: Client, cluster: str, namespace: str, names: set[str], timeout: float, progress: Say
) -> None:
    """Wait until the sets are gone and so are their machines (each reset and released)."""
    selector = f"{CLUSTER_LABEL}={cluster}"
    async with (
        Watched(client, namespace)
        .follow(MACHINE_SET, labels=selector)
        .follow(CLUSTER_MACHINE, labels=selector) as watched
    ):
        last = ""

        def left() -> dict[str, list[Resource]]:
            out: dict[str, list[Resource]] = {s.name: [] for s in watched.of(MACHINE_SET) if s.name in names}
            for member in watched.of(CLUSTER_MACHINE):
                owner = member.metadata.labels.get(MACHINE_SET_LABEL, "")
                if owner in names:
                    out.setdefault(owner, []).append(member)
            return out

        def report() -> None:
            nonlocal last
            parts = []
            for name, members in sorted(left().items()):
                doing = sorted({str((m.status or {}).get("teardown") or "") for m in members} - {""})
                parts.append(
                    f"{name} ({len(members)} machine(s) left{': ' + '; '.join(doing) if doing else ''})"
                )
            line = "waiting for machine set(s) to be torn down: " + ", ".join(parts) if parts else ""
            if line and line != last:
                progress(line)
                last = line

        if not await watched.until(lambda: not left(), timeout, report):
            raise UsageFailure(f"timed out after {timeout:g}s: {last}")
