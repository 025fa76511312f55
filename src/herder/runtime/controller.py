"""What a controller is: its primary kind, the watches that map events to its keys, what it writes, and
its reconcile.

A reconcile gets a ``Context``: reads shared from the store's caches, and writes checked against the
controller's declared outputs (``runtime.outputs``), made in its name, so that the store lets it, and
only it, change the objects it owns.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

from herder.resources import KindInfo, ObjectMeta, OwnerReference, Resource
from herder.resources.status import AnyConditions, dump_status, status_of
from herder.runtime.clock import REAL_CLOCK, Clock
from herder.runtime.event_recorder import EventRecorder, EventType
from herder.runtime.outputs import Declaration, Output, UndeclaredOutput
from herder.state.errors import AlreadyExists, Conflict, NotFound
from herder.state.store import CONTROLLER_ANNOTATION, SYSTEM, Store, WatchEvent

M = TypeVar("M", bound=BaseModel)

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
    the object's JSON, such as ``status.ready`` or ``metadata.deletionTimestamp``; ``status.conditions[T]``
    is the condition of type T, as declarations name it): a controller that reads only those fields of a
    busy kind is not woken by every other write to it."""
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
            name, bracket, kind = part.partition("[")
            value = value.get(name)
            if bracket:  # conditions[Ready]: the condition of that type
                kind = kind.removesuffix("]")
                found = (c for c in value or () if isinstance(c, dict) and c.get("type") == kind)
                value = next(found, None)
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
    """Subclasses set ``name``, ``primary`` (the kind of the keys they reconcile), ``watches`` (their
    inputs: the primary kind and what maps to it) and ``outputs`` (what they write: ``Owns``, ``Writes``),
    and write ``reconcile``, which must be idempotent.

    What a controller reads (``Context.get``, ``Context.list``, its watch events) is shared with every
    other reader: it writes through ``Context.mutate``, ``mutate_status`` and ``apply_output``, which
    change copies, and never changes an object it read in place. Writes outside ``outputs`` raise
    ``UndeclaredOutput``.
    """

    name: str
    primary: str
    watches: Sequence[Watch]
    outputs: Sequence[Output] = ()
    concurrency: int = 1
    settle: float = 0.0
    """Seconds a key its watches bring waits before its reconcile, gathering what else comes meanwhile: for
    a summary of many objects (a set's machines), whose changes come in bursts and would each be a write."""

    @abc.abstractmethod
    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None: ...

    def started(self) -> None:  # noqa: B027 - most controllers prepare nothing: no-op by default
        """Begin work the controller does beyond its reconciles (called on the event loop, as it starts)."""

    async def shutdown(self) -> None:  # noqa: B027 - most controllers hold nothing: no-op by default
        """Release what the controller holds beyond its reconciles (streams, listeners) when it stops."""


class Context:
    """The store as one controller (or one action) sees it: reads shared from the caches; writes made
    in its name, checked against what it declared it writes; its Events and its clock.

    ``owners`` are the declarations of every controller running beside it, by name: ``release`` asks
    the owner of an object for its deletion through them.
    """

    def __init__(
        self,
        store: Store,
        name: str,
        outputs: Sequence[Output] = (),
        *,
        primary: str | None = None,
        events: EventRecorder | None = None,
        clock: Clock = REAL_CLOCK,
        owners: Mapping[str, Declaration] | None = None,
    ) -> None:
        self.store = store
        self.controller = name
        self.primary = primary
        self._owners = owners if owners is not None else {}
        # Known beside the others', it also knows what they claim of its own outputs.
        self.declaration = self._owners.get(name) or Declaration(name, outputs)
        self.events = events or EventRecorder(store)
        self.clock = clock

    # reads

    async def get(self, key: ObjectKey) -> Resource | None:
        """The object as stored now, shared with every other reader of it: read it, never change it
        (``mutate`` changes a copy; ``clone()`` gives one)."""
        try:
            return (await self.store.read(key.kind, key.name, key.namespace)).shared()
        except NotFound:
            return None

    async def list(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Resource]:
        """The objects of a kind (in ``namespace``, matching the selectors), shared as ``get``'s are."""
        listed = await self.store.scan(
            kind, namespace, label_selector=label_selector, field_selector=field_selector
        )
        return [state.shared() for state in listed.items]

    # writes

    def own(self, obj: Resource) -> bool:
        """Whether ``obj`` is one of this controller's outputs: marked with its name, or (a shared output,
        or one made before outputs were marked) unmarked with a controller owner of its primary kind."""
        made_by = obj.metadata.annotations.get(CONTROLLER_ANNOTATION)
        if made_by is not None:
            return made_by == self.controller
        ref = obj.metadata.controller_ref()
        return ref is not None and ref.kind == self.primary and self.declaration.owns(obj.kind)

    def theirs(self, obj: Resource) -> bool:
        """Whether ``obj`` is another controller's output, closed to this one."""
        return obj.metadata.annotations.get(CONTROLLER_ANNOTATION) not in (None, self.controller)

    def _actor(self, current: Resource) -> str:
        """Whose name a checked write of ``current`` carries: the controller's, or (for a declared field
        of another controller's object, which the store would refuse it) herder's own."""
        owner = current.metadata.annotations.get(CONTROLLER_ANNOTATION)
        return SYSTEM if owner not in (None, self.controller) else self.controller

    async def _update(self, current: Resource, changed: Resource) -> Resource:
        self.declaration.check_update(current, changed, own=self.own(current))
        return await self.store.update(changed, actor=self._actor(current))

    async def _write_status(self, current: Resource, changed: Resource) -> Resource:
        return await self.store.update_status(changed, actor=self.controller)

    async def create(self, obj: Resource) -> Resource:
        """Create an object of a kind the controller declares it creates (``Writes(kind, creates=True)``),
        which is not its own: for its own outputs, ``apply_output``."""
        self.declaration.check_create(obj, owned=False)
        return await self.store.create(obj, actor=self.controller)

    async def mutate(self, key: ObjectKey, change: Callable[[Resource], None]) -> Resource | None:
        """Change an object's metadata or body: ``change`` edits a copy of the newest object in place,
        and is run again on a fresher one when another writer got in first. None when it is gone."""

        def edit(current: Resource) -> Resource:
            changed = current.clone()
            change(changed)
            return changed

        return await self._retrying(key, edit, self._update)

    async def mutate_status(
        self, key: ObjectKey, model: type[M], change: Callable[[Resource, M], None]
    ) -> Resource | None:
        """Change part of an object's status: ``change`` edits the status of the newest object as its
        typed ``model``, and is run again on a fresher one when another writer got in first, so that
        controllers owning different status fields of one object never undo each other. None when the
        object is gone."""

        def edit(current: Resource) -> Resource:
            status = status_of(current, model)
            # What the status is, as its model reads it: the defaults it fills in are no change.
            baseline = dump_status(status)
            change(current, status)
            changed = current.model_copy(update={"status": dump_status(status)})
            self.declaration.check_update(
                current.model_copy(update={"status": baseline}), changed, own=self.own(current)
            )
            return changed

        return await self._retrying(key, edit, self._write_status)

    async def condition(
        self,
        obj: Resource,
        kind: str,
        ok: bool | None,
        reason: str,
        message: str = "",
        *,
        event: EventType | None = None,
    ) -> Resource | None:
        """Set condition ``kind`` of ``obj`` (its transition time moves only when its status flips), and
        tell it as an Event of type ``event`` when its reason changed. None when the object is gone."""
        before: list[str] = []

        def edit(current: Resource, status: AnyConditions) -> None:
            found = status.condition(kind)
            before[:] = [found.reason] if found is not None else []
            status.set_condition(kind, ok, reason, message, now=self.clock.rfc3339())

        updated = await self.mutate_status(ObjectKey.of(obj), AnyConditions, edit)
        if updated is not None and event is not None and before != [reason]:
            await self.event(updated, event, reason, message)
        return updated

    async def _retrying(
        self,
        key: ObjectKey,
        edit: Callable[[Resource], Resource],
        write: Callable[[Resource, Resource], Awaitable[Resource]],
    ) -> Resource | None:
        for attempt in range(_MUTATE_ATTEMPTS):
            current = await self.get(key)
            if current is None:
                return None
            changed = edit(current)
            if changed == current:
                return current
            try:
                return await write(current, changed)
            except Conflict:
                if attempt == _MUTATE_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    async def event(self, obj: Resource, type_: EventType, reason: str, message: str) -> None:
        """Tell, on ``obj``, what this controller did (``Normal``) or what failed (``Warning``)."""
        await self.events.record(obj, type_, reason, message)

    async def delete(self, key: ObjectKey) -> Resource | None:
        """Delete one of the controller's own outputs, or an object of a kind it declares it deletes.
        None when it is gone already."""
        current = await self.get(key)
        if current is None:
            return None
        self.declaration.check_delete(current, own=self.own(current), theirs=self.theirs(current))
        try:
            return await self.store.delete(key.kind, key.name, key.namespace, actor=self._actor(current))
        except NotFound:
            return None

    async def release(self, key: ObjectKey) -> Resource | None:
        """Delete an object that may be another controller's output: that one by its owner's leave
        (``Owns(kind, releasable=True)``), anything else as ``delete`` does. None when it is gone already."""
        current = await self.get(key)
        if current is None:
            return None
        if not self.theirs(current):
            self.declaration.check_delete(current, own=self.own(current), theirs=False)
        else:
            owner = current.metadata.annotations[CONTROLLER_ANNOTATION]
            declared = self._owners.get(owner)
            if declared is None or not declared.releasable(key.kind):
                raise UndeclaredOutput(
                    f"controller {self.controller} releases {key}, whose owner {owner} does not let others "
                    "release it"
                )
        try:
            return await self.store.delete(key.kind, key.name, key.namespace, actor=self._actor(current))
        except NotFound:
            return None

    def reference_to(self, owner: Resource, *, controller: bool = True) -> OwnerReference:
        """An owner reference to ``owner``: what it refers from is garbage-collected after it. Outputs get
        theirs, the controller one, from ``apply_output``; a plain one makes an object a dependent."""
        info: KindInfo = self.store.registry.for_object(owner)
        return OwnerReference(
            apiVersion=info.api_version,
            kind=owner.kind,
            name=owner.name,
            uid=owner.metadata.uid or "",
            controller=controller,
            blockOwnerDeletion=True,
        )

    async def apply_output(self, owner: Resource | None, desired: Resource) -> Resource:
        """Create or update an object this controller owns (``Owns``) on behalf of ``owner``.

        The output gets a controller owner reference to ``owner`` (so it is garbage-collected after it;
        none without an owner) and the controller annotation (so nobody else may change it). An update
        takes the desired metadata and body and keeps the status. An object of the same name that is
        another owner's is not taken over: ``AlreadyExists``.
        """
        out = desired.clone()
        out.metadata.owner_references = [self.reference_to(owner)] if owner is not None else []
        if not self.declaration.shares(out.kind):
            out.metadata.annotations[CONTROLLER_ANNOTATION] = self.controller
        self.declaration.check_create(out, owned=True)
        # A generated name is new by definition.
        current = await self.get(ObjectKey.of(out)) if out.name else None
        if current is None:
            return await self.store.create(out, actor=self.controller)
        if self.theirs(current) or current.metadata.owner_references != out.metadata.owner_references:
            # Another owner's (an object of the same name made for another set, say): never taken over.
            raise AlreadyExists(out.kind, out.name)
        merged = current.clone()
        merged.spec = out.spec
        merged.metadata.labels = out.metadata.labels
        merged.metadata.annotations = {**current.metadata.annotations, **out.metadata.annotations}
        merged.metadata.finalizers = list(
            dict.fromkeys([*current.metadata.finalizers, *out.metadata.finalizers])
        )
        for field, value in (out.model_extra or {}).items():
            setattr(merged, field, value)
        if merged == current:
            return current
        # Its own, or (made before outputs were marked) adopted now by the same owner.
        self.declaration.check_update(current, merged, own=True)
        return await self.store.update(merged, actor=self.controller)

    async def ensure_finalizer(self, obj: Resource, finalizer: str) -> Resource:
        """Add a finalizer (to the newest object: others write it meanwhile); ``obj`` when it is gone."""
        if finalizer in obj.metadata.finalizers:
            return obj

        def add(current: Resource) -> None:
            if finalizer not in current.metadata.finalizers:
                current.metadata.finalizers.append(finalizer)

        return await self.mutate(ObjectKey.of(obj), add) or obj

    async def remove_finalizer(self, obj: Resource, finalizer: str) -> Resource:
        """Drop a finalizer; the store removes the object if it was the last one of a deleted object."""
        if finalizer not in obj.metadata.finalizers:
            return obj

        def drop(current: Resource) -> None:
            current.metadata.finalizers = [f for f in current.metadata.finalizers if f != finalizer]

        return await self.mutate(ObjectKey.of(obj), drop) or obj
