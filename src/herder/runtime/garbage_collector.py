"""Garbage collection: an object whose owners are all gone is deleted.

It is a controller like any other. Its mapper keeps an index from owner uid to dependents, so that
when an owner is deleted its dependents are reconciled; reconciling a dependent checks that each
owner still exists with the same uid, and deletes the dependent once none does. On start, the initial
listing reconciles every dependent, so orphans left while no leader ran are collected too.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from herder.resources import KindRegistry
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch
from herder.runtime.outputs import ANY_KIND, Writes
from herder.state.store import WatchEvent


class GarbageCollector(Controller):
    name = "GarbageCollector"
    primary = ANY_KIND
    outputs = (Writes(ANY_KIND, deletes=True),)
    concurrency = 2

    def __init__(self, registry: KindRegistry) -> None:
        self._dependents: defaultdict[str, set[ObjectKey]] = defaultdict(set)
        self._kinds = {info.kind: info for info in registry}
        self.watches = [Watch(info.kind, self._map) for info in registry]

    def _map(self, event: WatchEvent) -> Iterable[ObjectKey]:
        obj = event.object
        key = ObjectKey.of(obj)
        owners = obj.metadata.owner_references
        if event.type == "DELETED":
            for ref in owners:
                self._dependents[ref.uid].discard(key)
            return self._dependents.pop(obj.metadata.uid or "", set())
        for ref in owners:
            self._dependents[ref.uid].add(key)
        before = event.previous
        if before is not None and before.metadata.owner_references == owners:
            return ()  # a change of anything but its owners cannot orphan an object
        return (key,) if owners else ()

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        obj = await ctx.get(key)
        if obj is None or not obj.metadata.owner_references:
            return None
        for ref in obj.metadata.owner_references:
            info = self._kinds.get(ref.kind)
            if info is None:
                continue  # an owner of a kind this server does not serve: leave the object alone
            owner = await ctx.get(ObjectKey(ref.kind, obj.namespace if info.namespaced else None, ref.name))
            if owner is not None and owner.metadata.uid == ref.uid:
                return None
        await ctx.delete(key)
        return None
