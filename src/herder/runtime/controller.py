"""What a controller is: the kinds it watches, how an event maps to keys, and its reconcile.

A reconcile gets a ``Context`` whose writes carry the controller's name, so the store lets it, and
only it, change the objects it owns.
"""

from __future__ import annotations

import abc
import copy
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from herder.resources import KindInfo, ObjectMeta, OwnerReference, Resource
from herder.runtime.event_recorder import EventRecorder, EventType
from herder.state.errors import Conflict, NotFound
from herder.state.store import CONTROLLER_ANNOTATION, Store, WatchEvent

# How often a mutation is redone on the newest object when another writer got in first.
_MUTATE_ATTEMPTS = 10


@dataclass(frozen=True, order=True)
class ObjectKey:
    kind: str
    namespace: str | None
    name: str

    @classmethod
    def of(cls, obj: Resource) -> ObjectKey:
        return cls(obj.kind, obj.namespace, obj.name)

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}" if self.namespace else f"{self.kind}/{self.name}"


Mapper = Callable[[WatchEvent], Iterable[ObjectKey]]


def own_key(event: WatchEvent) -> Iterable[ObjectKey]:
    """Reconcile the object the event is about."""
    return (ObjectKey.of(event.object),)


def controller_owner(kind: str) -> Mapper:
    """Reconcile the owner (of ``kind``) of the object the event is about: for watching outputs."""

    def mapper(event: WatchEvent) -> Iterable[ObjectKey]:
        ref = event.object.metadata.controller_ref()
        if ref is not None and ref.kind == kind:
            yield ObjectKey(kind, event.object.namespace, ref.name)

    return mapper


def same_name(kind: str) -> Mapper:
    """Reconcile the object of ``kind`` with the same name and namespace (a Machine → its ClusterMachine)."""

    def mapper(event: WatchEvent) -> Iterable[ObjectKey]:
        yield ObjectKey(kind, event.object.namespace, event.object.name)

    return mapper


def labelled_owner(kind: str, label: str) -> Mapper:
    """Reconcile the object of ``kind`` that the event's object names in ``label`` (a ClusterMachine →
    the Cluster of its ``herder.dev/cluster`` label)."""

    def mapper(event: WatchEvent) -> Iterable[ObjectKey]:
        name = event.object.metadata.labels.get(label)
        if name:
            yield ObjectKey(kind, event.object.namespace, name)

    return mapper


def on_change(mapper: Mapper, *fields: str) -> Mapper:
    """``mapper``, for events that add or delete an object or change one of ``fields`` (dotted paths into
    the object's JSON, such as ``status.ready`` or ``metadata.deletionTimestamp``): a controller that
    reads only those fields of a busy kind is not woken by every other write to it."""
    paths = [tuple(f.split(".")) for f in fields]

    def changed(event: WatchEvent) -> Iterable[ObjectKey]:
        before = event.previous
        if event.type == "MODIFIED" and before is not None:
            old, new = _Fields(before), _Fields(event.object)
            if all(old.pick(p) == new.pick(p) for p in paths):
                return ()
        return mapper(event)

    return changed


# ObjectMeta's attributes by their JSON names (``deletionTimestamp`` → ``deletion_timestamp``).
_METADATA_ATTRIBUTES = {field.alias or name: name for name, field in ObjectMeta.model_fields.items()}


class _Fields:
    """An object's fields by JSON path, read without serializing all of it (watches compare a few
    fields of every change)."""

    __slots__ = ("_obj",)

    def __init__(self, obj: Resource) -> None:
        self._obj = obj

    def pick(self, path: tuple[str, ...]) -> Any:
        head, rest = path[0], path[1:]
        value: Any
        if head == "metadata":
            # A metadata field is read as its attribute: both sides of a comparison read it alike.
            attribute = _METADATA_ATTRIBUTES.get(rest[0]) if rest else None
            if attribute is None:
                return None
            value, rest = getattr(self._obj.metadata, attribute), rest[1:]
        elif head in ("spec", "status"):
            value = getattr(self._obj, head)
        else:
            value = (self._obj.model_extra or {}).get(head)
        for part in rest:
            if not isinstance(value, dict):
                return None
            value = value.get(part)
        return value


@dataclass(frozen=True)
class Watch:
    kind: str
    map: Mapper = own_key
    label_selector: str | None = None


@dataclass(frozen=True)
class Result:
    """What a reconcile asks for next: ``requeue_after`` seconds, or nothing until the next event."""

    requeue_after: float | None = None


class Controller(abc.ABC):
    """Subclasses set ``name`` and ``watches`` and write ``reconcile``; it must be idempotent.

    What a controller reads (``Context.get``, ``Context.list``, its watch events) is shared with every
    other reader: it writes through ``Context.mutate``, ``mutate_status`` and ``apply_output``, which
    change copies, and never changes an object it read in place.
    """

    name: str
    watches: Sequence[Watch]
    concurrency: int = 1

    @abc.abstractmethod
    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None: ...

    def started(self) -> None:  # noqa: B027 - most controllers prepare nothing: no-op by default
        """Begin work the controller does beyond its reconciles (called on the event loop, as it starts)."""

    async def shutdown(self) -> None:  # noqa: B027 - most controllers hold nothing: no-op by default
        """Release what the controller holds beyond its reconciles (streams, listeners) when it stops."""


class Context:
    """The store as one controller sees it: its writes are made in its name, its Events carry it."""

    def __init__(self, store: Store, controller: str, events: EventRecorder | None = None) -> None:
        self.store = store
        self.controller = controller
        self.events = events or EventRecorder(store)

    async def get(self, key: ObjectKey) -> Resource | None:
        """The object as stored now, shared with every other reader of it: read it, never change it
        (``mutate`` changes a copy; ``clone()`` gives one)."""
        try:
            return (await self.store.read(key.kind, key.name, key.namespace)).shared()
        except NotFound:
            return None

    async def list(
        self, kind: str, namespace: str | None = None, *, label_selector: str | None = None
    ) -> list[Resource]:
        """The objects of a kind (in ``namespace``, matching ``label_selector``), shared as ``get``'s are."""
        listed = await self.store.scan(kind, namespace, label_selector=label_selector)
        return [state.shared() for state in listed.items]

    async def create(self, obj: Resource) -> Resource:
        return await self.store.create(obj, actor=self.controller)

    async def update(self, obj: Resource) -> Resource:
        return await self.store.update(obj, actor=self.controller)

    async def update_status(self, obj: Resource) -> Resource:
        return await self.store.update_status(obj, actor=self.controller)

    async def mutate(self, key: ObjectKey, change: Callable[[Resource], None]) -> Resource | None:
        """Change an object's metadata or body: ``change`` edits a copy of the newest object in place,
        and is run again on a fresher one when another writer got in first. None when it is gone."""

        def edit(current: Resource) -> Resource:
            changed = current.clone()
            change(changed)
            return changed

        return await self._retrying(key, edit, self.update)

    async def mutate_status(
        self, key: ObjectKey, mutate: Callable[[Resource, dict[str, Any]], None]
    ) -> Resource | None:
        """Change part of an object's status: ``mutate`` edits the status dict of the newest object in
        place, and is run again on a fresher one when another writer got in first, so controllers that
        own different status fields of one object never undo each other. None when the object is gone."""

        def edit(current: Resource) -> Resource:
            status = copy.deepcopy(current.status or {})
            mutate(current, status)
            return current.model_copy(update={"status": status})

        return await self._retrying(key, edit, self.update_status)

    async def _retrying(
        self,
        key: ObjectKey,
        edit: Callable[[Resource], Resource],
        write: Callable[[Resource], Awaitable[Resource]],
    ) -> Resource | None:
        for attempt in range(_MUTATE_ATTEMPTS):
            current = await self.get(key)
            if current is None:
                return None
            changed = edit(current)
            if changed == current:
                return current
            try:
                return await write(changed)
            except Conflict:
                if attempt == _MUTATE_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    async def event(self, obj: Resource, type_: EventType, reason: str, message: str) -> None:
        """Tell, on ``obj``, what this controller did (``Normal``) or what failed (``Warning``)."""
        await self.events.record(obj, type_, reason, message)

    async def delete(self, key: ObjectKey) -> Resource | None:
        try:
            return await self.store.delete(key.kind, key.name, key.namespace, actor=self.controller)
        except NotFound:
            return None

    def reference_to(self, owner: Resource) -> OwnerReference:
        """A controller owner reference to ``owner``: what it owns is garbage-collected after it."""
        info: KindInfo = self.store.registry.for_object(owner)
        return OwnerReference(
            apiVersion=info.api_version,
            kind=owner.kind,
            name=owner.name,
            uid=owner.metadata.uid or "",
            controller=True,
            blockOwnerDeletion=True,
        )

    async def apply_output(self, owner: Resource, desired: Resource) -> Resource:
        """Create or update an object this controller owns on behalf of ``owner``.

        The output gets an ownerReference with ``controller: true`` (so it is garbage-collected after
        its owner) and the controller annotation (so nobody else may change it). Its status is kept.
        """
        out = desired.clone()
        out.metadata.owner_references = [self.reference_to(owner)]
        out.metadata.annotations[CONTROLLER_ANNOTATION] = self.controller
        current = await self.get(ObjectKey.of(out))
        if current is None:
            return await self.create(out)
        merged = current.clone()
        merged.spec = out.spec
        merged.metadata.labels = out.metadata.labels
        merged.metadata.annotations = {**current.metadata.annotations, **out.metadata.annotations}
        merged.metadata.owner_references = out.metadata.owner_references
        for field, value in (out.model_extra or {}).items():
            setattr(merged, field, value)
        return await self.update(merged)

    async def ensure_finalizer(self, obj: Resource, finalizer: str) -> Resource:
        if finalizer in obj.metadata.finalizers:
            return obj
        changed = obj.clone()
        changed.metadata.finalizers.append(finalizer)
        return await self.update(changed)

    async def remove_finalizer(self, obj: Resource, finalizer: str) -> Resource:
        """Drop a finalizer; the store removes the object if it was the last one of a deleted object."""
        if finalizer not in obj.metadata.finalizers:
            return obj
        changed = obj.clone()
        changed.metadata.finalizers = [f for f in obj.metadata.finalizers if f != finalizer]
        return await self.update(changed)
