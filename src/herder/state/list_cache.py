"""Every object of the kinds recently listed, kept current by the store's watch: lists read memory.

A kind is loaded whole on its first list and from then on follows the store's one backend watch, as
Kubernetes's watch cache does, so that a list costs no backend read and no decoding. The store serves a
list from here only once its watch has caught up with the backend's current revision (a list is as
fresh as one read from the backend). The cache holds at most ``cap`` bytes of stored values: the kinds
listed least recently are dropped first, and a kind larger than the whole cap is not kept at all.
"""

from __future__ import annotations

import bisect
import logging
from collections import OrderedDict
from collections.abc import Iterable

from herder.state.stored import Stored

log = logging.getLogger(__name__)


def kind_prefix_of(key: str) -> str:
    """The key prefix of the kind a key belongs to: ``/group/plural/``."""
    return key[: key.index("/", key.index("/", 1) + 1) + 1]


class KindSnapshot:
    """The states of every key under one kind's prefix, in key order, as of revision ``rev``."""

    __slots__ = ("_by_label", "_keys", "_states", "prefix", "rev", "size")

    def __init__(self, prefix: str, rev: int) -> None:
        self.prefix = prefix
        # Every change of this kind up to ``rev`` is reflected, none after it.
        self.rev = rev
        self.size = 0
        # Sorted keys and their states, index by index: a list is a slice of ``_states``.
        self._keys: list[str] = []
        self._states: list[Stored] = []
        # label → value → keys, for the labels lists have selected by (built on the first such list):
        # a list of one cluster's machines reads its few keys, not every object of the kind.
        self._by_label: dict[str, dict[str, set[str]]] = {}

    def _find(self, key: str) -> tuple[int, bool]:
        i = bisect.bisect_left(self._keys, key)
        return i, i < len(self._keys) and self._keys[i] == key

    def put(self, state: Stored) -> None:
        i, found = self._find(state.key)
        if found:
            self.size -= len(self._states[i].value)
            self._unindex(self._states[i])
            self._states[i] = state
        else:
            self._keys.insert(i, state.key)
            self._states.insert(i, state)
        self.size += len(state.value)
        self._index(state)

    def remove(self, key: str) -> None:
        i, found = self._find(key)
        if found:
            self.size -= len(self._states[i].value)
            self._unindex(self._states[i])
            del self._keys[i], self._states[i]

    def _index(self, state: Stored) -> None:
        for label, keys in self._by_label.items():
            value = state.labels.get(label)
            if value is not None:
                keys.setdefault(value, set()).add(state.key)

    def _unindex(self, state: Stored) -> None:
        for label, keys in self._by_label.items():
            value = state.labels.get(label)
            if value is not None and value in keys:
                keys[value].discard(state.key)

    def labelled(self, label: str, values: Iterable[str]) -> list[Stored]:
        """The states whose ``label`` has one of ``values``, in key order."""
        index = self._by_label.get(label)
        if index is None:
            index = self._by_label[label] = {}
            for state in self._states:
                value = state.labels.get(label)
                if value is not None:
                    index.setdefault(value, set()).add(state.key)
        keys = sorted(set().union(*(index.get(value, ()) for value in values)))
        return [self._states[self._find(key)[0]] for key in keys]

    def get(self, key: str) -> Stored | None:
        i, found = self._find(key)
        return self._states[i] if found else None

    def apply(self, key: str, rev: int, state: Stored | None) -> None:
        """Follow one committed change; one this snapshot already reflects is ignored."""
        if rev <= self.rev:
            return
        self.rev = rev
        if state is None:
            self.remove(key)
        else:
            self.put(state)

    def states(
        self,
        prefix: str,
        start_after: str | None = None,
        *,
        labelled: tuple[str, Iterable[str]] | None = None,
    ) -> list[Stored]:
        """The states under ``prefix`` (this kind's, or one namespace's in it), after ``start_after``;
        with ``labelled`` (label, values), only those whose label has one of the values."""
        if labelled is not None:
            return [
                state
                for state in self.labelled(*labelled)
                if state.key.startswith(prefix) and (start_after is None or state.key > start_after)
            ]
        keys = self._keys
        lo = bisect.bisect_right(keys, start_after) if start_after else bisect.bisect_left(keys, prefix)
        # Keys are ASCII paths: every key under the prefix sorts below prefix + U+FFFF.
        return self._states[lo : bisect.bisect_left(keys, prefix + "\uffff", lo)]


class ListCache:
    """The kinds kept, at most ``cap`` bytes of stored values in all, least recently listed dropped first."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        # Least recently listed first.
        self._kinds: OrderedDict[str, KindSnapshot] = OrderedDict()
        # Kinds found larger than the cap: listed from the backend from then on.
        self.too_large: set[str] = set()

    def get(self, prefix: str) -> KindSnapshot | None:
        snapshot = self._kinds.get(prefix)
        if snapshot is not None:
            self._kinds.move_to_end(prefix)
        return snapshot

    def state(self, key: str) -> Stored | None:
        """The cached state of ``key``, if its kind is cached."""
        snapshot = self._kinds.get(kind_prefix_of(key)) if self._kinds else None
        return snapshot.get(key) if snapshot is not None else None

    def install(self, snapshot: KindSnapshot) -> bool:
        """Keep a freshly loaded kind; whether it fits."""
        if snapshot.size > self.cap:
            log.info(
                "%s holds %d bytes, more than the list cache's %d: it is listed from the backend",
                snapshot.prefix,
                snapshot.size,
                self.cap,
            )
            self.too_large.add(snapshot.prefix)
            return False
        self._kinds[snapshot.prefix] = snapshot
        self._trim()
        return True

    def apply(self, key: str, rev: int, state: Stored | None) -> None:
        """Follow one committed change of the watch (``state`` None: the key was deleted)."""
        if not self._kinds:
            return
        snapshot = self._kinds.get(kind_prefix_of(key))
        if snapshot is not None:
            snapshot.apply(key, rev, state)
            if state is not None:
                self._trim()

    def clear(self) -> None:
        """Forget every kind (the watch missed changes: nothing here can be trusted)."""
        self._kinds.clear()

    def _trim(self) -> None:
        size = sum(s.size for s in self._kinds.values())
        while size > self.cap and self._kinds:
            _, dropped = self._kinds.popitem(last=False)
            size -= dropped.size
