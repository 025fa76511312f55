"""What a controller is: the kinds it watches, how an event maps to keys, and its reconcile.

A reconcile gets a ``Context`` whose writes carry the controller's name, so the store lets it, and
only it, change the objects it owns.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from herder.resources import KindInfo, OwnerReference, Resource
from herder.state.errors import NotFound
from herder.state.store import CONTROLLER_ANNOTATION, Store, WatchEvent


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
    """Subclasses set ``name`` and ``watches`` and write ``reconcile``; it must be idempotent."""

    name: str
    watches: Sequence[Watch]
    concurrency: int = 1

    @abc.abstractmethod
    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None: ...


class Context:
    """The store as one controller sees it: its writes are made in its name."""

    def __init__(self, store: Store, controller: str) -> None:
        self.store = store
        self.controller = controller

    async def get(self, key: ObjectKey) -> Resource | None:
        try:
            return await self.store.get(key.kind, key.name, key.namespace)
        except NotFound:
            return None

    async def create(self, obj: Resource) -> Resource:
        return await self.store.create(obj, actor=self.controller)

    async def update(self, obj: Resource) -> Resource:
        return await self.store.update(obj, actor=self.controller)

    async def update_status(self, obj: Resource) -> Resource:
        return await self.store.update_status(obj, actor=self.controller)

    async def delete(self, key: ObjectKey) -> Resource | None:
        try:
            return await self.store.delete(key.kind, key.name, key.namespace, actor=self.controller)
        except NotFound:
            return None

    async def apply_output(self, owner: Resource, desired: Resource) -> Resource:
        """Create or update an object this controller owns on behalf of ``owner``.

        The output gets an ownerReference with ``controller: true`` (so it is garbage-collected after
        its owner) and the controller annotation (so nobody else may change it). Its status is kept.
        """
        info: KindInfo = self.store.registry.for_object(owner)
        out = desired.clone()
        out.metadata.owner_references = [
            OwnerReference(
                apiVersion=info.api_version,
                kind=owner.kind,
                name=owner.name,
                uid=owner.metadata.uid or "",
                controller=True,
                blockOwnerDeletion=True,
            )
        ]
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
