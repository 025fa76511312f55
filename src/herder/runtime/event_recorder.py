"""Kubernetes Events: what controllers did and what failed, told on the objects they did it to, so that
``kubectl describe`` and ``kubectl get events`` tell the story.

The recorder writes core ``v1`` Events as Kubernetes' event recorder does: the same event again within
ten minutes counts up the one already written instead of adding another.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

from herder.resources import Resource, now_rfc3339
from herder.resources.access import HIDDEN_LABEL
from herder.state.errors import NotFound, StateError
from herder.state.store import SYSTEM, Store

log = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]

# Kubernetes' event recorder folds repeats within this window.
REPEAT_WINDOW = 600.0
_REMEMBERED = 10_000


@dataclass
class _Written:
    name: str
    namespace: str
    count: int
    at: float


class EventRecorder:
    """Writes Events for one component (``herder``); a failure to record never fails the caller."""

    def __init__(self, store: Store, component: str = "herder", instance: str = "") -> None:
        self._store = store
        self._component = component
        self._instance = instance
        self._recent: OrderedDict[tuple[str, str, str, str], _Written] = OrderedDict()

    async def record(self, obj: Resource, type_: EventType, reason: str, message: str) -> None:
        key = (obj.metadata.uid or obj.name, type_, reason, message)
        now = time.monotonic()
        seen = self._recent.get(key)
        try:
            if seen is not None and now - seen.at < REPEAT_WINDOW:
                seen.count += 1
                seen.at = now
                await self._count_up(seen)
                return
            self._recent[key] = await self._create(obj, type_, reason, message, now)
            if len(self._recent) > _REMEMBERED:
                self._recent.popitem(last=False)
        except StateError as exc:
            log.warning("could not record event %s on %s %s: %s", reason, obj.kind, obj.name, exc)

    async def _create(
        self, obj: Resource, type_: EventType, reason: str, message: str, now: float
    ) -> _Written:
        stamp = now_rfc3339()
        namespace = obj.namespace or "default"
        event = Resource.model_validate(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {
                    "name": f"{obj.name}.{secrets.token_hex(8)}",
                    "namespace": namespace,
                    # The Events of a hidden object are as hidden as it is.
                    "labels": {HIDDEN_LABEL: "true"} if HIDDEN_LABEL in obj.metadata.labels else {},
                },
                "involvedObject": {
                    "apiVersion": obj.api_version,
                    "kind": obj.kind,
                    "name": obj.name,
                    **({"namespace": obj.namespace} if obj.namespace else {}),
                    "uid": obj.metadata.uid or "",
                    "resourceVersion": obj.metadata.resource_version or "",
                },
                "reason": reason,
                "message": message,
                "type": type_,
                "source": {"component": self._component},
                "reportingComponent": self._component,
                "reportingInstance": self._instance,
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
            }
        )
        created = await self._store.create(event, actor=SYSTEM)
        return _Written(created.name, namespace, 1, now)

    async def _count_up(self, seen: _Written) -> None:
        try:
            event = await self._store.get("Event", seen.name, seen.namespace)
        except NotFound:
            return
        data = event.to_dict()
        data.update(count=seen.count, lastTimestamp=now_rfc3339())
        await self._store.update(Resource.from_dict(data), actor=SYSTEM)
