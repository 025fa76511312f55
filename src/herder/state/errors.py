"""Errors of the storage contract. The API layer maps each to a Kubernetes Status code."""

from __future__ import annotations


class StateError(Exception):
    """Base of every storage error."""


class NotFound(StateError):
    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f'{kind} "{name}" not found')
        self.kind = kind
        self.name = name


class AlreadyExists(StateError):
    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f'{kind} "{name}" already exists')
        self.kind = kind
        self.name = name


class Conflict(StateError):
    """A precondition failed: stale resourceVersion or uid."""


class Gone(StateError):
    """A watch asked for a revision older than the retained history: re-list, then watch again."""

    def __init__(self, revision: int, oldest: int) -> None:
        super().__init__(
            f"too old resource version: {revision} (oldest retained: {oldest}); list again, then watch"
        )
        self.revision = revision
        self.oldest = oldest


class Forbidden(StateError):
    """A write refused by the store itself: a controller-owned object changed by someone else."""


class Invalid(StateError):
    """A request the store cannot carry out as asked (bad selector, bad continue token, bad change)."""


class Unavailable(StateError):
    """The backend cannot be reached right now; the request may be retried."""


class Fenced(StateError):
    """A write made under a lease (``herder.state.fence``) that this process no longer holds: another
    replica may be doing the work now, so the write is refused rather than made twice."""
