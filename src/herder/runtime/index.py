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

from herder.resources import Resource
from herder.runtime.controller import Mapper, ObjectKey
from herder.state.store import WatchEvent


class FieldIndex:
    """Objects of ``kind`` by the value ``value_of`` reads from each (None: not indexed)."""

    def __init__(self, kind: str, value_of: Callable[[Resource], str | None]) -> None:
        self.kind = kind
        self._value_of_object = value_of
        self._by_value: defaultdict[tuple[str | None, str], set[ObjectKey]] = defaultdict(set)
        self._value_of: dict[ObjectKey, tuple[str | None, str]] = {}

    def track(self, event: WatchEvent) -> Iterable[ObjectKey]:
        """The mapper of the indexed kind's own watch: keeps the index, and reconciles the object."""
        obj = event.object
        key = ObjectKey.of(obj)
        old = self._value_of.pop(key, None)
        if old is not None:
            self._by_value[old].discard(key)
            if not self._by_value[old]:
                del self._by_value[old]
        value = self._value_of_object(obj)
        if event.type != "DELETED" and value is not None:
            entry = (obj.namespace, value)
            self._by_value[entry].add(key)
            self._value_of[key] = entry
        return (key,)

    def keys(self, namespace: str | None, value: str) -> list[ObjectKey]:
        return sorted(self._by_value.get((namespace, value), ()))

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
