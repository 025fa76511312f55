"""An index of which objects of a kind carry each value of one of their fields (a label, a reference in
their spec), kept from that kind's watch.

Controllers use it to map an event on one object to the objects that depend on it through that field
(a Cluster's event to the ClusterMachines labelled with its name; a MachineRequestSet's to the MachineSet
allocating from it) without reading the store in a mapper. The watch that feeds it also reconciles every
object it lists, so an event mapped before the index is complete loses nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from herder.resources import Resource
from herder.runtime.controller import Mapper, ObjectKey
from herder.state.store import WatchEvent

T = TypeVar("T")


class FieldIndex:
    """Objects of ``kind`` by the value ``value_of`` reads from each (None: not indexed), per namespace, or
    across namespaces when ``namespaced`` is False (a cluster-wide object's dependents, wherever they are)."""

    def __init__(
        self, kind: str, value_of: Callable[[Resource], str | None], *, namespaced: bool = True
    ) -> None:
        self.kind = kind
        self._value_of_object = value_of
        self._namespaced = namespaced
        self._by_value: defaultdict[tuple[str | None, str], set[ObjectKey]] = defaultdict(set)
        self._value_of: dict[ObjectKey, tuple[str | None, str]] = {}

    def update(self, event: WatchEvent) -> tuple[str | None, str | None]:
        """Keep the index of an event of the indexed kind: the object's value before it, and after it."""
        obj = event.object
        key = ObjectKey.of(obj)
        old = self._value_of.pop(key, None)
        if old is not None:
            self._by_value[old].discard(key)
            if not self._by_value[old]:
                del self._by_value[old]
        value = self._value_of_object(obj) if event.type != "DELETED" else None
        if value is not None:
            entry = (obj.namespace if self._namespaced else None, value)
            self._by_value[entry].add(key)
            self._value_of[key] = entry
        return (old[1] if old is not None else None), value

    def track(self, event: WatchEvent) -> Iterable[ObjectKey]:
        """The mapper of the indexed kind's own watch: keeps the index, and reconciles the object."""
        self.update(event)
        return (ObjectKey.of(event.object),)

    def keys(self, namespace: str | None, value: str) -> list[ObjectKey]:
        return sorted(self._members(namespace, value))

    def _members(self, namespace: str | None, value: str) -> set[ObjectKey]:
        return self._by_value.get((namespace if self._namespaced else None, value), set())

    def by_name(self) -> Mapper:
        """A mapper for another kind: its object's name is the indexed value (a Cluster → its machines)."""
        return self._mapper(lambda event: event.object.name)

    def _mapper(self, value_of: Callable[[WatchEvent], str | None]) -> Mapper:
        def mapper(event: WatchEvent) -> Iterable[ObjectKey]:
            value = value_of(event)
            return self.keys(event.object.namespace, value) if value is not None else ()

        return mapper


class LabelIndex(FieldIndex):
    """Objects of ``kind`` by the value of their ``label``."""

    def __init__(self, kind: str, label: str) -> None:
        super().__init__(kind, lambda obj: obj.metadata.labels.get(label))
        self.label = label

    def by_label(self, label: str | None = None) -> Mapper:
        """A mapper for another kind carrying the same label (a MachineSet → its cluster's machines)."""
        wanted = label or self.label
        return self._mapper(lambda event: event.object.metadata.labels.get(wanted))


class ViewIndex(FieldIndex, Generic[T]):
    """An index that also keeps, of each object it indexes, what ``view`` makes of it as its last event
    showed it: a controller that reads many objects at every reconcile (a set's requests) reads them as
    they were parsed once, at their event."""

    def __init__(
        self,
        kind: str,
        value_of: Callable[[Resource], str | None],
        view: Callable[[Resource], T],
        *,
        namespaced: bool = True,
    ) -> None:
        super().__init__(kind, value_of, namespaced=namespaced)
        self._view = view
        # By value, then key: a value's views are read without a lookup per object.
        self._views: defaultdict[tuple[str | None, str], dict[ObjectKey, T]] = defaultdict(dict)

    def update(self, event: WatchEvent) -> tuple[str | None, str | None]:
        obj = event.object
        namespace = obj.namespace if self._namespaced else None
        before, after = super().update(event)
        key = ObjectKey.of(obj)
        if before is not None:
            # Where it was: the namespace an object is in never changes.
            views = self._views[(namespace, before)]
            views.pop(key, None)
            if not views:
                del self._views[(namespace, before)]
        if after is not None:
            self._views[(namespace, after)][key] = self._view(obj)
        return before, after

    def views(self, namespace: str | None, value: str) -> list[T]:
        """What ``view`` made of the objects of ``value``, in no order."""
        found = self._views.get((namespace if self._namespaced else None, value))
        return list(found.values()) if found is not None else []
