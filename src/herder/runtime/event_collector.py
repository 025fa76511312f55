"""Deletes Kubernetes Events an hour after they last happened, as the API server's event TTL does."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch
from herder.runtime.outputs import Writes

EVENT_TTL = 3600.0


def _age(stamp: str | None) -> float:
    if not stamp:
        return EVENT_TTL
    then = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return (datetime.now(UTC) - then).total_seconds()


class EventCollector(Controller):
    """Deletes each Event ``ttl`` seconds after it last happened."""

    name = "EventCollector"
    primary = "Event"
    outputs = (Writes("Event", deletes=True),)

    def __init__(self, ttl: float = EVENT_TTL) -> None:
        self.ttl = ttl
        self.watches: Sequence[Watch] = (Watch("Event"),)

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        event = await ctx.get(key)
        if event is None:
            return None
        extra = event.model_extra or {}
        age = _age(extra.get("lastTimestamp") or event.metadata.creation_timestamp)
        if age < self.ttl:
            return Result(requeue_after=self.ttl - age + 1)
        await ctx.delete(key)
        return None
