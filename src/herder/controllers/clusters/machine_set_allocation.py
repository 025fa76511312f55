"""Allocation: a MachineSet gets its machines as MachineSetNodes, each named by the machine's UUID.

A static set binds exactly the machines it lists; a set of a MachineClass binds free machines its
selector matches (connected, in maintenance, in no cluster, not read-only) until it has ``size`` of
them. The node's name being the machine's UUID is what keeps a machine in one set at most: a second
set cannot create the same node. Shrinking deletes nodes (their machines are then torn down): workers
by the set's ``deleteStrategy``, control planes one at a time and only while etcd is healthy. A set
short of machines says which and why on ``status.allocation``. The sets of a locked cluster
(``herder.dev/locked``) neither bind nor release a machine until it is unlocked, but those of an imported
one (``herder.dev/imported``) bind the machines it runs on until they are taken over.
"""

from __future__ import annotations

from collections.abc import Iterable

from herder.controllers.clusters.cluster_machines import NODE_FINALIZER
from herder.controllers.members import (
    cluster_of,
    labelled,
    lock_changes,
    locked_message,
    request_set_count,
    request_set_sources,
    set_nodes,
)
from herder.resources import Resource
from herder.resources.access import HIDDEN_LABEL, READ_ONLY_ANNOTATION, read_only_of
from herder.resources.clusters import (
    CLUSTER,
    CLUSTER_MACHINE,
    MACHINE_SET,
    MACHINE_SET_NODE,
    AllocationStatus,
    ClusterMachineStatus,
    ClusterStatus,
    MachineSetSpec,
    MachineSetStatus,
    is_importing,
    is_locked,
)
from herder.resources.machines import (
    CLUSTER_LABEL,
    MACHINE,
    MACHINE_CLASS,
    MACHINE_SET_LABEL,
    ROLE_LABEL,
    LabelSelectorSpec,
    MachineClassSpec,
    MachineStatus,
)
from herder.resources.provisioning import (
    MACHINE_REQUEST_SET,
    MACHINE_REQUEST_SET_LABEL,
    PROVISIONING,
    RELEASING_ANNOTATION,
    MachineRequestSetStatus,
)
from herder.resources.status import find_condition, status_of
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch, controller_owner
from herder.runtime.index import LabelIndex
from herder.runtime.outputs import Owns, Writes
from herder.state.errors import AlreadyExists
from herder.state.store import WatchEvent

_GATE_RETRY = 2.0


def free_for_allocation(machine: Resource, *, read_only: bool = False) -> bool:
    """Whether a machine may be given to a set that picks from a class (or, with ``read_only``, from
    the request set whose machines are read-only because they are the platform's)."""
    meta = machine.metadata
    return (
        status_of(machine, MachineStatus).in_maintenance
        and CLUSTER_LABEL not in meta.labels
        and (read_only or READ_ONLY_ANNOTATION not in meta.annotations)
        and RELEASING_ANNOTATION not in meta.annotations
        and not meta.deletion_timestamp
    )


class MachineSetAllocationController(Controller):
    name = "MachineSetAllocation"
    primary = MACHINE_SET.kind
    outputs = (
        Writes(MACHINE_SET.kind, "status.allocation"),
        Owns(MACHINE_SET_NODE.kind, shared=True),
        Writes(MACHINE_SET_NODE.kind, deletes=True),
    )
    concurrency = 4
    # A set's machines come in bursts (a provider's connect within a moment): bound in one reconcile, with
    # one write of what is still missing rather than one per machine. (The set's summary settles longer.)
    settle = 0.5

    def __init__(self) -> None:
        # Sets of a class that last found too few machines: a machine that becomes free wakes them.
        self._waiting: set[ObjectKey] = set()
        self._sources = request_set_sources()
        self._sets = LabelIndex(MACHINE_SET.kind, CLUSTER_LABEL)
        self.watches = (
            Watch(MACHINE_SET.kind, self._set_changed),
            Watch(MACHINE_SET_NODE.kind, self._node_changed),
            Watch(MACHINE.kind, self._machine_freed),
            Watch(MACHINE_CLASS.kind, self._class_changed),
            # A set waiting for a provider's machines says what its MachineRequestSet says.
            Watch(MACHINE_REQUEST_SET.kind, controller_owner(MACHINE_SET.kind)),
            Watch(MACHINE_REQUEST_SET.kind, self._sources.by_name()),
            # Unlocking a cluster lets its sets bind and release again.
            Watch(CLUSTER.kind, lock_changes(self._sets.by_name())),
        )

    def _set_changed(self, event: WatchEvent) -> Iterable[ObjectKey]:
        self._sets.update(event)
        return self._sources.track(event)

    def _node_changed(self, event: WatchEvent) -> Iterable[ObjectKey]:
        name = event.object.metadata.labels.get(MACHINE_SET_LABEL)
        return (ObjectKey(MACHINE_SET.kind, event.object.namespace, name),) if name else ()

    def _machine_freed(self, event: WatchEvent) -> Iterable[ObjectKey]:
        # A request set's machines are free for the set allocating them, read-only or not.
        from_requests = MACHINE_REQUEST_SET_LABEL in event.object.metadata.labels
        if event.type == "DELETED" or not free_for_allocation(event.object, read_only=from_requests):
            return ()
        if event.previous is not None and free_for_allocation(event.previous, read_only=from_requests):
            return ()
        return [k for k in self._waiting if k.namespace == event.object.namespace]

    def _class_changed(self, event: WatchEvent) -> Iterable[ObjectKey]:
        return [k for k in self._waiting if k.namespace == event.object.namespace]

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        machine_set = await ctx.get(key)
        self._waiting.discard(key)
        if machine_set is None or machine_set.metadata.deletion_timestamp:
            return None
        cluster = await cluster_of(ctx, machine_set)
        if cluster is None or cluster.metadata.deletion_timestamp:
            return None
        spec = MACHINE_SET.spec_of(machine_set, MachineSetSpec)
        nodes = await set_nodes(ctx, machine_set)
        live = [n for n in nodes if not n.metadata.deletion_timestamp]
        # An imported cluster's sets take their machines while it is locked: that takes over configs they
        # run already, and changes nothing on them.
        if is_locked(cluster) and not is_importing(cluster):
            # Held back: a set with a change pending says why it waits (one without has nothing to say).
            pending = await _pending(ctx, machine_set, spec, live)
            held = AllocationStatus(reason="waiting: " + locked_message(cluster.name)) if pending else None
            await self._record(ctx, key, held)
            return None
        leaving = len(nodes) - len(live)
        missing: list[str] = []
        reason = ""
        if spec.machines is not None:
            listed = set(spec.machines)
            extra = [n for n in live if n.name not in listed]
            have = {n.name for n in live}
            for uuid in spec.machines:
                if uuid not in have:
                    why = await self._bind(ctx, machine_set, spec, uuid)
                    if why:
                        missing.append(uuid)
                        reason = reason or why
        elif spec.machine_class is not None or spec.machine_request_set is not None:
            size = await _size(ctx, machine_set, spec)
            extra = []
            if size is None:
                reason = f"machine request set {spec.machine_request_set} does not exist"
                self._waiting.add(key)
            elif isinstance(size, int) and len(live) > size:
                extra = _shrink_order(live)[: len(live) - size]
            else:
                reason = await self._fill(ctx, machine_set, spec, live, size)
                if reason:
                    self._waiting.add(key)
        else:
            extra = []  # nodes are made by hand
        gated = bool(extra) and not await self._release(ctx, machine_set, spec, cluster, live, extra, leaving)

        await self._record(ctx, key, AllocationStatus(missing=missing, reason=reason) if reason else None)
        # A release held back by its gate (etcd health, a replacement not up yet) is looked at again soon.
        return Result(requeue_after=_GATE_RETRY) if gated else None

    async def _record(self, ctx: Context, key: ObjectKey, allocation: AllocationStatus | None) -> None:
        def record(_: Resource, status: MachineSetStatus) -> None:
            status.allocation = allocation

        await ctx.mutate_status(key, MachineSetStatus, record)

    async def _bind(self, ctx: Context, machine_set: Resource, spec: MachineSetSpec, uuid: str) -> str:
        """Create the node of ``uuid`` for this set; what stands in the way, if anything."""
        machine = await ctx.get(ObjectKey(MACHINE.kind, machine_set.namespace, uuid))
        if machine is None:
            return f"machine {uuid} is not registered"
        if READ_ONLY_ANNOTATION in machine.metadata.annotations:
            return f"machine {uuid} is read-only, managed by the platform"
        taken = await ctx.get(ObjectKey(MACHINE_SET_NODE.kind, machine_set.namespace, uuid))
        if taken is not None:
            owner = taken.metadata.labels.get(MACHINE_SET_LABEL, "")
            if owner == machine_set.name:
                return f"machine {uuid} is still leaving this set"
            return f"machine {uuid} is in machine set {owner}"
        elsewhere = machine.metadata.labels.get(CLUSTER_LABEL)
        if elsewhere and elsewhere != machine_set.metadata.labels.get(CLUSTER_LABEL):
            return f"machine {uuid} is still being released from cluster {elsewhere}"
        return "" if await self._create_node(ctx, machine_set, spec, uuid) else f"machine {uuid} was taken"

    async def _fill(
        self, ctx: Context, machine_set: Resource, spec: MachineSetSpec, live: list[Resource], size: int | str
    ) -> str:
        """Bind free machines of the set's class or request set until it has ``size``; why it could not,
        if it could not."""
        wanted = None if size == "unlimited" else int(size) - len(live)
        if wanted is not None and wanted <= 0:
            return ""
        if spec.machine_request_set is not None:
            return await self._fill_from_requests(
                ctx, machine_set, spec, spec.machine_request_set, wanted or 0
            )
        assert spec.machine_class is not None
        machine_class = await ctx.get(
            ObjectKey(MACHINE_CLASS.kind, machine_set.namespace, spec.machine_class.name)
        )
        if machine_class is None:
            return f"machine class {spec.machine_class.name} does not exist"
        class_spec = MACHINE_CLASS.spec_of(machine_class, MachineClassSpec)
        if class_spec.selector is None:
            # Machines a provider makes for this set: those of its MachineRequestSet, named as the set.
            selector = f"{MACHINE_REQUEST_SET_LABEL}={machine_set.name}"
        else:
            selector = LabelSelectorSpec.model_validate(class_spec.selector).to_selector_string()
        matching = await ctx.list(MACHINE.kind, machine_set.namespace, label_selector=selector)
        if class_spec.selector is not None and MACHINE_REQUEST_SET_LABEL not in selector:
            # A provider's machines are for their own request set: a selector takes them only by name.
            matching = [m for m in matching if MACHINE_REQUEST_SET_LABEL not in m.metadata.labels]
        free = [m for m in matching if free_for_allocation(m)]
        made_for_it = class_spec.selector is None
        short = await self._bind_free(ctx, machine_set, spec, free, wanted, tell=not made_for_it)
        if not short:
            return ""
        if class_spec.auto_provision is not None:
            return await _requests_progress(
                ctx,
                machine_set,
                machine_set.name,
                short,
                f"infra provider {class_spec.auto_provision.provider_id}",
            )
        # Counted after this round's binds: the machines it just took are not free any more.
        still_free = len(free) - ((wanted or 0) - short)
        return (
            f"{short} more machine(s) wanted from class {spec.machine_class.name}: "
            f"{len(matching)} match its selector, {still_free} of them free "
            "(connected, in maintenance, in no cluster)"
        )

    async def _fill_from_requests(
        self, ctx: Context, machine_set: Resource, spec: MachineSetSpec, request_set: str, wanted: int
    ) -> str:
        """Bind the free machines of ``request_set``: the set's own, read-only ones included (a managed
        control plane's machines are read-only to users, not to the set made for them)."""
        listed = await ctx.list(
            MACHINE.kind, machine_set.namespace, label_selector=f"{MACHINE_REQUEST_SET_LABEL}={request_set}"
        )
        free = [m for m in listed if free_for_allocation(m, read_only=True)]
        short = await self._bind_free(ctx, machine_set, spec, free, wanted, tell=False)
        if not short:
            return ""
        return await _requests_progress(
            ctx, machine_set, request_set, short, f"machine request set {request_set}"
        )

    async def _bind_free(
        self,
        ctx: Context,
        machine_set: Resource,
        spec: MachineSetSpec,
        free: list[Resource],
        wanted: int | None,
        *,
        tell: bool,
    ) -> int:
        """Bind ``free`` machines (by UUID order) until ``wanted`` are bound; how many are still wanted.
        ``tell``: an Allocated Event for each, but for machines a provider made for this set (their
        MachineSetNode and the set's count tell it; the Event was a write per machine saying the same)."""
        bound = 0
        for machine in sorted(free, key=lambda m: m.name):
            if wanted is not None and bound >= wanted:
                break
            # Its labels lag behind its node (membership writes them after): a machine with a node is
            # taken, by this set (which counts it already) or another, and binding it is no new bind.
            if await ctx.get(ObjectKey(MACHINE_SET_NODE.kind, machine_set.namespace, machine.name)):
                continue
            if await self._create_node(ctx, machine_set, spec, machine.name, tell=tell):
                bound += 1
        return 0 if wanted is None else max(wanted - bound, 0)

    async def _create_node(
        self, ctx: Context, machine_set: Resource, spec: MachineSetSpec, uuid: str, *, tell: bool = True
    ) -> bool:
        node = Resource.model_validate(
            {
                "apiVersion": MACHINE_SET_NODE.api_version,
                "kind": MACHINE_SET_NODE.kind,
                "metadata": {
                    "name": uuid,
                    "namespace": machine_set.namespace,
                    "labels": {
                        CLUSTER_LABEL: machine_set.metadata.labels[CLUSTER_LABEL],
                        MACHINE_SET_LABEL: machine_set.name,
                        ROLE_LABEL: spec.role,
                    },
                    "annotations": read_only_of(machine_set),
                    # Membership's, from the start: a write less per machine (it adds it all the same
                    # to a node made by hand, and lets it go once the machine has left the cluster).
                    "finalizers": [NODE_FINALIZER],
                },
            }
        )
        try:
            await ctx.apply_output(machine_set, node)
        except AlreadyExists:
            return False
        if tell:
            await ctx.event(machine_set, "Normal", "Allocated", f"machine {uuid} allocated")
        return True

    async def _release(
        self,
        ctx: Context,
        machine_set: Resource,
        spec: MachineSetSpec,
        cluster: Resource,
        live: list[Resource],
        extra: list[Resource],
        leaving: int,
    ) -> bool:
        """Delete the nodes of machines the set no longer wants, as fast as its strategy allows; whether
        any could go now."""
        if spec.role == "controlplane":
            # One control plane at a time, only while etcd is healthy, and only once the control planes
            # that stay are all up (a replacement joins before the machine it replaces leaves).
            if leaving or not status_of(cluster, ClusterStatus).condition_true("EtcdHealthy"):
                return False
            members = await labelled(
                ctx, CLUSTER_MACHINE.kind, machine_set.namespace, MACHINE_SET_LABEL, machine_set.name
            )
            going = {n.name for n in extra}
            ready = {m.name for m in members if status_of(m, ClusterMachineStatus).ready}
            if any(n.name not in ready for n in live if n.name not in going):
                return False
            allowed = 1
        else:
            allowed = spec.delete_strategy.parallelism(len(extra)) - leaving
        for node in extra[: max(allowed, 0)]:
            await ctx.delete(ObjectKey.of(node))
            await ctx.event(machine_set, "Normal", "Releasing", f"machine {node.name} leaves the set")
        return allowed > 0


async def _pending(ctx: Context, machine_set: Resource, spec: MachineSetSpec, live: list[Resource]) -> bool:
    """Whether a set's nodes differ from what it asks for (a set of unlimited size never differs)."""
    if spec.machines is not None:
        return set(spec.machines) != {n.name for n in live}
    if spec.machine_class is None and spec.machine_request_set is None:
        return False
    size = await _size(ctx, machine_set, spec)
    return isinstance(size, int) and size != len(live)


async def _size(ctx: Context, machine_set: Resource, spec: MachineSetSpec) -> int | str | None:
    """How many machines a class or request set allocating set wants: its class's size, or the machine
    count of its request set (None while that does not exist)."""
    if spec.machine_class is not None:
        return spec.machine_class.size
    return await request_set_count(ctx, machine_set)


async def _requests_progress(
    ctx: Context, machine_set: Resource, request_set: str, short: int, source: str
) -> str:
    """Why ``short`` machines are missing, as the MachineRequestSet they come from says it (a request
    held up by an error, its refusals, its machines provisioned but not yet here) — unless it is hidden
    (a managed control plane's), which users may not know of: then only that the platform is at it.

    While it plainly provisions, the set names it rather than repeat its progress: that changes at every
    step of every request, and each change would be two writes of the MachineSet (this and its Ready).
    Machines it has provisioned that are not here yet (connected, in maintenance) are still on their way:
    they usually come within seconds, and saying so would be two more writes."""
    made = await ctx.get(ObjectKey(MACHINE_REQUEST_SET.kind, machine_set.namespace, request_set))
    if made is not None and HIDDEN_LABEL in made.metadata.labels:
        return f"{short} more machine(s) wanted: the platform is provisioning them"
    ready = find_condition(status_of(made, MachineRequestSetStatus).conditions, "Ready") if made else None
    if ready is None or ready.get("reason") == PROVISIONING or ready.get("status") == "True":
        return (
            f"{short} more machine(s) wanted from {source}: being provisioned "
            f"(machine request set {request_set} says how far)"
        )
    return f"{short} more machine(s) wanted from {source}: {ready.get('message') or ''}"


def _shrink_order(nodes: list[Resource]) -> list[Resource]:
    """Which nodes go first when a class set shrinks: the newest first (the oldest have run longest)."""
    return sorted(nodes, key=lambda n: (n.metadata.creation_timestamp or "", n.name), reverse=True)
