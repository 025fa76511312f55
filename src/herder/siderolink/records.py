"""Read-modify-write of the objects the SideroLink server keeps (links, join tokens' use), retried when
another writer came between (a conflict), as the controllers' ``mutate`` does."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from herder.resources import KindInfo, Resource
from herder.state.errors import Conflict, NotFound
from herder.state.store import SYSTEM, Store

_ATTEMPTS = 20


async def mutate(
    store: Store, kind: KindInfo, name: str, namespace: str | None, change: Callable[[Resource], None]
) -> Resource | None:
    """Apply ``change`` to the object and write it when it changed; None when there is no such object."""
    for _ in range(_ATTEMPTS):
        try:
            current = await store.get(kind, name, namespace)
        except NotFound:
            return None
        changed = current.model_copy(deep=True)
        change(changed)
        if changed.spec == current.spec and changed.metadata == current.metadata:
            return current
        try:
            return await store.update(changed, actor=SYSTEM)
        except Conflict:
            continue
    raise Conflict(f"{kind.kind} {name}: changed by others {_ATTEMPTS} times in a row")


async def mutate_status(
    store: Store,
    kind: KindInfo,
    name: str,
    namespace: str | None,
    change: Callable[[dict[str, Any]], None],
) -> Resource | None:
    """Apply ``change`` to the object's status (a dict) and write it when it changed."""
    for _ in range(_ATTEMPTS):
        try:
            current = await store.get(kind, name, namespace)
        except NotFound:
            return None
        status = copy.deepcopy(current.status or {})
        change(status)
        if status == (current.status or {}):
            return current
        changed = current.model_copy(deep=True)
        changed.status = status
        try:
            return await store.update_status(changed, actor=SYSTEM)
        except Conflict:
            continue
    raise Conflict(f"{kind.kind} {name}: changed by others {_ATTEMPTS} times in a row")
