"""Admission: checks of a kind that need more than its own object (other objects, a version policy).

A kind's typed models say what one object may hold; an admission check says whether a write fits the
rest of the state (a machine already in another set, a class that does not exist, an upgrade the
version policy refuses). The composition root registers checks per kind; the store runs them on every
create, update and delete, dry runs included, whoever writes, so the API, controllers and the CLI meet
the same rules. A check raises ``InvalidObject`` (422, naming the field), ``Forbidden`` or ``Conflict``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from herder.resources import Resource


@dataclass(frozen=True)
class Write:
    """One write as admission sees it: ``old`` is None on create, ``new`` is None on delete. Checks that
    read other objects hold the store they read from (they are made by the composition root)."""

    actor: str | None
    old: Resource | None
    new: Resource | None

    @property
    def object(self) -> Resource:
        obj = self.new if self.new is not None else self.old
        assert obj is not None
        return obj


Check = Callable[[Write], Awaitable[None]]


class Admission:
    """The checks registered per kind, run in registration order."""

    def __init__(self) -> None:
        self._checks: defaultdict[str, list[Check]] = defaultdict(list)

    def register(self, kind: str, check: Check) -> None:
        self._checks[kind].append(check)

    def __contains__(self, kind: str) -> bool:
        return kind in self._checks

    async def admit(self, write: Write) -> None:
        for check in self._checks.get(write.object.kind, ()):
            await check(write)
