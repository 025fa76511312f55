"""The raw key-value contract every backend implements: revisioned keys, preconditions, a watch.

The ``Store`` builds the resource semantics (validation, generation, finalizers, selectors,
encryption, fan-out of watches) on top of this once, so a backend only has to get this small
contract right — and one conformance suite checks every backend through the ``Store``.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Callable
from typing import ClassVar, NamedTuple


# Named tuples, not frozen dataclasses: one of each is made per commit and per row read, and a frozen
# dataclass takes five times as long to build.
class KV(NamedTuple):
    key: str
    value: bytes
    mod_rev: int


class RawEvent(NamedTuple):
    """One committed change: ``value`` is None for a delete, ``prev`` None for a create."""

    rev: int
    key: str
    value: bytes | None
    prev: bytes | None


class KeyExists(Exception):
    """``create`` found the key already present."""


class RevisionMismatch(Exception):
    """The key's modification revision is not the expected one (or the key is gone)."""

    def __init__(self, current: KV | None) -> None:
        super().__init__("revision mismatch")
        self.current = current


class Compacted(Exception):
    """A watch asked for a revision older than the retained history."""

    def __init__(self, oldest: int) -> None:
        super().__init__(f"revisions before {oldest} are compacted")
        self.oldest = oldest


class Backend(abc.ABC):
    """Keys ordered as strings, one global revision that only grows, and a watch from any revision."""

    # Whether each revision ``revision`` reports is a change that ``watch`` delivers, so that a watcher
    # that has reached ``revision()`` has seen every change. Not so where revisions are shared with keys
    # outside the watched ones (etcd's coordination keys, other programs' keys).
    watch_reaches_revision: ClassVar[bool] = True

    @abc.abstractmethod
    async def get(self, key: str) -> KV | None: ...

    @abc.abstractmethod
    async def range(
        self, prefix: str, *, start_after: str | None = None, limit: int | None = None
    ) -> tuple[list[KV], int]:
        """Keys under ``prefix`` in order, after ``start_after``, and the revision they were read at."""

    async def count(self, prefix: str) -> int:
        """How many keys are under ``prefix`` (backends with a cheaper way than reading them override it)."""
        total, start_after = 0, None
        while True:
            kvs, _ = await self.range(prefix, start_after=start_after, limit=1000)
            total += len(kvs)
            if len(kvs) < 1000:
                return total
            start_after = kvs[-1].key

    @abc.abstractmethod
    async def create(self, key: str, value: bytes) -> int:
        """Write a new key; ``KeyExists`` if present. Returns the new revision."""

    @abc.abstractmethod
    async def replace(self, key: str, value: bytes, expected_rev: int) -> int:
        """Overwrite a key whose mod revision is ``expected_rev``; else ``RevisionMismatch``."""

    @abc.abstractmethod
    async def remove(self, key: str, expected_rev: int) -> int:
        """Delete a key whose mod revision is ``expected_rev``; else ``RevisionMismatch``."""

    @abc.abstractmethod
    def watch(self, prefix: str, from_rev: int) -> AsyncIterator[RawEvent]:
        """Every change under ``prefix`` with revision >= ``from_rev``, in order, forever.

        Raises ``Compacted`` when ``from_rev`` is older than the retained history.
        """

    @abc.abstractmethod
    async def compact(self, revision: int) -> None:
        """Forget the history before ``revision``: a watch from an older one raises ``Compacted``."""

    @abc.abstractmethod
    async def revision(self) -> int:
        """The revision of the last committed change."""

    def changed_after(self, key: str, rev: int) -> bool | None:
        """Whether ``key`` was changed after revision ``rev``, told without asking anyone where this
        process makes every change (an embedded backend holding its file's lock); None where others may
        write too, or where it cannot tell."""
        return None

    def listen(self, listener: Callable[[RawEvent], None] | None) -> bool:
        """Hand every change committed from now on to ``listener`` as part of its commit, in order, on
        the event loop (None: stop). Only where this process makes every change (an embedded backend);
        elsewhere (False) the changes come through ``watch``. A listener does little and never raises."""
        return False

    async def close(self) -> None:  # noqa: B027 - backends without resources need no close
        """Release connections and files."""
