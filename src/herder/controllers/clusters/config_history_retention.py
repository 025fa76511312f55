"""The age of config histories: entries applied more than ``MAX_AGE_SECONDS`` ago leave a machine's
MachineConfigHistory even when nothing new is applied to it, and a history left with no entry goes. (How
many are kept, the newest ``MAX_ENTRIES``, is held where entries are added: ``config_history``.)"""

from __future__ import annotations

from herder.controllers.clusters.config_history import kept
from herder.resources import Resource
from herder.resources.config_history import MACHINE_CONFIG_HISTORY, MAX_AGE_SECONDS, MachineConfigHistorySpec
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch
from herder.runtime.outputs import Writes


class ConfigHistoryRetentionController(Controller):
    name = "ConfigHistoryRetention"
    primary = MACHINE_CONFIG_HISTORY.kind
    outputs = (Writes(MACHINE_CONFIG_HISTORY.kind, "spec.entries", deletes=True),)
    concurrency = 2
    watches = (Watch(MACHINE_CONFIG_HISTORY.kind),)

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        history = await ctx.get(key)
        if history is None:
            return None
        spec = MACHINE_CONFIG_HISTORY.spec_of(history, MachineConfigHistorySpec)
        now = ctx.clock.now()
        keep = kept(spec.entries, now)
        if not keep:
            await ctx.delete(key)
            return None
        if len(keep) != len(spec.entries):
            entries = [e.model_dump(mode="json", by_alias=True) for e in keep]

            def trim(obj: Resource) -> None:
                obj.spec = {**(obj.spec or {}), "entries": entries}

            await ctx.mutate(key, trim)
        # Looked at again when its oldest entry comes of age.
        oldest = ctx.clock.age(keep[0].applied_at) or 0.0
        return Result(requeue_after=max(MAX_AGE_SECONDS - oldest, 1.0))
