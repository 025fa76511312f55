"""One stored state of one object: its key, its mod revision and its bytes as the backend holds them.

A ``Stored`` stands for one (key, revision) and is shared by whoever meets that state in this process:
the store's writes and watch, lists and gets. What readers derive from it (its labels, an API's JSON,
a Table row) is derived once and kept with it, so a state read a thousand times is decoded and encoded
once; it all goes when the state is replaced. ``decode`` gives each caller an object of its own;
``shared`` gives every caller the same one, decoded once, to read and never to change (as client-go's
informer caches do). With ``HERDER_CHECK_SHARED=1`` in the environment (the test suite sets it) every
``shared`` call first checks that no reader changed the object, as client-go's cache mutation detector.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from herder.resources import Resource

T = TypeVar("T")

# The labels of objects that have none: one shared, read-only mapping.
_NO_LABELS: Mapping[str, str] = MappingProxyType({})

CHECK_SHARED = os.environ.get("HERDER_CHECK_SHARED") == "1"


class SharedObjectChanged(RuntimeError):
    """A reader changed an object that ``Stored.shared`` hands to every reader (a bug in that reader)."""


class Stored:
    """One object state, shared: read it, derive from it, and ``decode`` it for an object to change."""

    __slots__ = ("_derived", "_labels", "_open", "key", "name", "rev", "value")

    def __init__(self, key: str, rev: int, value: bytes, open_value: Callable[[str, bytes], bytes]) -> None:
        self.key = key
        self.name = key.rsplit("/", 1)[1]
        self.rev = rev
        self.value = value
        # Turns ``value`` into the object's JSON (sealed kinds are encrypted at rest).
        self._open = open_value
        self._labels: Mapping[str, str] | None = None
        self._derived: dict[str, Any] | None = None

    def decode(self) -> Resource:
        """The object in this state, stamped with its revision: a new one on every call, the caller's own."""
        obj = Resource.from_json(self._open(self.key, self.value))
        obj.metadata.resource_version = str(self.rev)
        return obj

    def shared(self) -> Resource:
        """The object in this state, decoded once and the same for every caller: read it, never change it
        (``clone()`` it, or ``decode``, for an object of one's own)."""
        obj = self.derived("shared", Stored.decode)
        if CHECK_SHARED and obj != self.decode():
            raise SharedObjectChanged(
                f"{self.key} at revision {self.rev}: a reader changed the shared object; "
                "change a copy of it (clone()) instead"
            )
        return obj

    @property
    def labels(self) -> Mapping[str, str]:
        """The object's labels (read-only), read without decoding the whole object."""
        if self._labels is None:
            labels = json.loads(self._open(self.key, self.value)).get("metadata", {}).get("labels")
            self._labels = MappingProxyType(labels) if labels else _NO_LABELS
        return self._labels

    def derived(self, name: str, make: Callable[[Stored], T]) -> T:
        """What ``make`` derives from this state, made on the first call for ``name`` and then kept.

        ``name`` says what is derived and how (``"json"``, ``"table-row:Metadata"``): one name, one type.
        """
        derived = self._derived
        if derived is None:
            derived = self._derived = {}
        elif name in derived:
            value: T = derived[name]
            return value
        value = derived[name] = make(self)
        return value
