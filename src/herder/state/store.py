"""The storage contract: typed objects over any backend, with Kubernetes semantics.

``Store`` gives get, list, create, update, update_status, delete and watch for every kind of its
registry. It validates objects, keeps metadata (uid, generation, timestamps, resourceVersion),
runs finalizer-aware deletion, protects controller-owned objects, encrypts sensitive kinds, and
fans one backend watch out to every watcher. The same watch keeps the kinds recently listed in memory
(``list_cache``), so that lists read no backend and decode nothing; ``scan`` and ``read`` hand out the
shared ``Stored`` states themselves, for readers that derive from them (the API's JSON) once per state.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import builtins
import functools
import json
import secrets
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypedDict, TypeVar, Unpack

import pydantic_core
from prometheus_client import Counter

from herder.resources import (
    KindInfo,
    KindRegistry,
    ManagedFieldsEntry,
    Resource,
    UnknownKind,
    now_rfc3339,
)
from herder.resources.meta import CONTROLLER_ANNOTATION
from herder.state.admission import Admission, Write
from herder.state.backend import Backend, KeyExists, RawEvent, RevisionMismatch
from herder.state.encryption import Cipher
from herder.state.errors import AlreadyExists, Conflict, Forbidden, Invalid, NotFound
from herder.state.list_cache import KindSnapshot, ListCache, kind_prefix_of
from herder.state.selectors import FieldSelector, LabelSelector
from herder.state.stored import Stored
from herder.state.watch_hub import WatchHub

STORE_WRITES = Counter("herder_store_writes_total", "Writes committed to the store", ["op", "kind"])


@functools.cache
def _writes(op: str, kind: str) -> Counter:
    """The counter of one (op, kind): looking it up by labels costs more than counting."""
    return STORE_WRITES.labels(op, kind)


# Who may change a controller-owned object (CONTROLLER_ANNOTATION): the controller it names, or SYSTEM.
SYSTEM = "system:herder"

_NAMESPACES = "/core/namespaces/"

# The revision is the backend's to keep: it is set on every object read, never stored in it.
_UNSTORED = {"metadata": {"resource_version"}}
# The metadata only the server sets: an update keeps the stored object's, whatever it is given.
_SERVER_METADATA = ("uid", "creationTimestamp", "deletionTimestamp", "generateName")
# The top-level fields that are not an object's body (what its generation counts changes of).
_NOT_BODY = frozenset({"apiVersion", "kind", "metadata", "status"})

# How often an update without a resourceVersion is retried when another writer got in first.
_UNCONDITIONAL_ATTEMPTS = 50
# How long a list waits for the watch to catch up with the backend before reading the backend instead.
_LIST_CACHE_WAIT = 1.0

T = TypeVar("T")

EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """A change seen by a watcher. Objects are shared between watchers: copy before changing one.

    ``previous`` is the object before a MODIFIED change, for watchers that filter further (an API
    that hides some objects from some callers). ``state`` is the stored state ``object`` was decoded
    from, when ``object`` is the object at its own resourceVersion.
    """

    type: EventType
    object: Resource
    previous: Resource | None = None
    state: Stored | None = None


class Selection(TypedDict, total=False):
    """What a list selects besides kind and namespace (the keywords of ``Store.scan``)."""

    label_selector: str | LabelSelector | None
    field_selector: str | FieldSelector | None
    limit: int | None
    continue_token: str | None


@dataclass
class ListResult(Generic[T]):
    items: list[T]
    resource_version: int
    continue_token: str | None = None


class Change:
    """A backend event as watchers see it: the object after and before the change.

    Objects are decoded on first use and then shared, so a change nobody watches costs nothing and
    one watched by many is decoded once: ``obj`` is the new state's shared object (``Stored.shared``),
    the one its readers get too. ``state`` is the state after the change (None: deleted); ``prior`` the
    state it replaced, when the store still holds it.
    """

    __slots__ = ("_kind", "_obj", "_prev", "_raw", "_store", "key", "prior", "rev", "state")

    def __init__(self, store: Store, raw: RawEvent, state: Stored | None, prior: Stored | None) -> None:
        self._store = store
        self._raw = raw
        self.rev = raw.rev
        self.key = raw.key
        self._kind: KindInfo | bool | None = False
        self.state = state
        self.prior = prior
        self._obj: Resource | bool | None = False
        self._prev: Resource | bool | None = False

    @property
    def kind(self) -> KindInfo | None:
        if self._kind is False:
            self._kind = self._store._kind_of_key(self.key)
        return self._kind  # type: ignore[return-value]

    @property
    def obj(self) -> Resource | None:
        if self._obj is False:
            self._obj = self.state.shared() if self.state is not None else None
        return self._obj  # type: ignore[return-value]

    @property
    def prev(self) -> Resource | None:
        """The object before the change: after a modification, the replaced state's shared object; after
        a deletion, its last state stamped with the deletion's revision (what a DELETED event carries)."""
        if self._prev is False:
            if self.state is not None and self.prior is not None:
                self._prev = self.prior.shared()
            else:
                value = self._raw.prev
                self._prev = self._store._decode(self.key, value, self.rev) if value is not None else None
        return self._prev  # type: ignore[return-value]


def _gen_suffix() -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return "".join(secrets.choice(alphabet) for _ in range(5))


class Store:
    def __init__(
        self,
        backend: Backend,
        registry: KindRegistry,
        *,
        cipher: Cipher | None = None,
        watch_ring: int = 10_000,
        recent_cap: int = 100_000,
        admission: Admission | None = None,
        list_cache: int = 64 << 20,
    ) -> None:
        self.backend = backend
        self.registry = registry
        self.admission = admission or Admission()
        self._cipher = cipher
        # The kinds recently listed, at most ``list_cache`` bytes of stored values (0: lists read the
        # backend). Lists use it only where the watch can tell it has caught up with the backend.
        self._lists = ListCache(list_cache if backend.watch_reaches_revision else 0)
        self._loading: dict[str, asyncio.Future[KindSnapshot | None]] = {}
        self._hub: WatchHub[Change] = WatchHub(
            backend, self._decode_change, reset=self._lists.clear, ring=watch_ring
        )
        self._started = False
        # The newest state seen of each recently changed or read key (None: deleted), from this
        # store's own writes, its reads and the watch. Writes start from it instead of reading the
        # backend first; the backend's compare-and-swap catches a stale entry, and the write is then
        # redone fresh. Reads hand out the same shared state, with what was derived from it.
        self._recent: dict[str, tuple[int, Stored | None]] = {}
        self._recent_cap = recent_cap
        # Namespaces known to exist, kept current by the watch: a create checks its namespace here,
        # as Kubernetes's namespace admission checks its informer cache.
        self._namespaces: set[str] = set()
        self._ns_kind = next((k for k in registry if k.kind == "Namespace" and k.group == ""), None)

    async def start(self) -> Store:
        if not self._started:
            await self._hub.start()
            if self._ns_kind is not None:
                listed = await self.list(self._ns_kind)
                self._namespaces.update(o.name for o in listed.items)
            self._started = True
        return self

    async def close(self) -> None:
        for loading in list(self._loading.values()):
            loading.cancel()
        await self._hub.stop()
        await self.backend.close()

    async def __aenter__(self) -> Store:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # keys and encoding

    def kind(self, kind: str | KindInfo) -> KindInfo:
        return kind if isinstance(kind, KindInfo) else self.registry.get(kind)

    @staticmethod
    def kind_prefix(info: KindInfo, namespace: str | None = None) -> str:
        base = f"/{info.group or 'core'}/{info.plural}/"
        return f"{base}{namespace}/" if info.namespaced and namespace else base

    @classmethod
    def key(cls, info: KindInfo, name: str, namespace: str | None) -> str:
        if info.namespaced:
            if not namespace:
                raise Invalid(f"{info.kind} is namespaced: a namespace is required")
            return f"{cls.kind_prefix(info)}{namespace}/{name}"
        return f"{cls.kind_prefix(info)}{name}"

    def _kind_of_key(self, key: str) -> KindInfo | None:
        _, group, plural, *_ = key.split("/", 3)
        return self.registry.find_plural("" if group == "core" else group, plural)

    def _encode(self, info: KindInfo, key: str, obj: Resource) -> bytes:
        raw = obj.to_json(exclude=_UNSTORED)
        if info.sensitive:
            if self._cipher is None:
                raise Invalid(f"{info.kind} is sensitive and this store has no encryption key")
            return self._cipher.seal(key, raw)
        return raw

    def derived_key(self, purpose: str) -> bytes | None:
        """A key for ``purpose``, derived from the encryption key the store seals with (the same in every
        replica); None for a store that seals nothing."""
        return self._cipher.derive(purpose) if self._cipher is not None else None

    def _open(self, key: str, value: bytes) -> bytes:
        return self._cipher.open(key, value) if self._cipher is not None else value

    def _decode(self, key: str, value: bytes, rev: int) -> Resource:
        obj = Resource.from_json(self._open(key, value))
        obj.metadata.resource_version = str(rev)
        return obj

    def _state(self, key: str, rev: int, value: bytes, *, remember: bool = False) -> Stored:
        """The one shared state of ``key`` at ``rev``: the one already met, if any, else a new one."""
        known = self._recent.get(key)
        if known is not None and known[0] == rev and known[1] is not None:
            return known[1]
        cached = self._lists.state(key)
        state = cached if cached is not None and cached.rev == rev else Stored(key, rev, value, self._open)
        if remember:
            self._remember(key, rev, state)
        return state

    def _decode_change(self, raw: RawEvent) -> Change:
        state = self._state(raw.key, raw.rev, raw.value) if raw.value is not None else None
        # The list cache moves on with the watch alone: it still holds the state this change replaced.
        prior = self._lists.state(raw.key) if raw.prev is not None else None
        if prior is not None and prior.value != raw.prev:
            prior = None
        self._remember(raw.key, raw.rev, state, from_watch=True)
        self._lists.apply(raw.key, raw.rev, state)
        if raw.key.startswith(_NAMESPACES):
            name = raw.key[len(_NAMESPACES) :]
            if raw.value is None:
                self._namespaces.discard(name)
            else:
                self._namespaces.add(name)
        return Change(self, raw, state, prior)

    def _remember(self, key: str, rev: int, state: Stored | None, *, from_watch: bool = False) -> None:
        known = self._recent.get(key)
        if known is not None and known[0] > rev:
            return  # the watch is behind this store's own write: keep the newer value
        self._recent.pop(key, None)
        if state is None and from_watch:
            return  # nothing older than a delete the watch has delivered can still arrive
        self._recent[key] = (rev, state)
        if len(self._recent) > self._recent_cap:
            del self._recent[next(iter(self._recent))]

    def _deleted(self, key: str, rev: int) -> None:
        """Remember this store's delete of ``key``, unless the watch delivered it already (an embedded
        backend hands over each commit): then there is nothing the watch could still overwrite."""
        if rev > self._hub.last_rev:
            self._remember(key, rev, None)

    async def _current(self, info: KindInfo, name: str, namespace: str | None) -> Stored:
        key = self.key(info, name, namespace)
        kv = await self.backend.get(key)
        if kv is None:
            raise NotFound(info.plural, name)
        return self._state(key, kv.mod_rev, kv.value, remember=True)

    async def _with_current(
        self, info: KindInfo, name: str, namespace: str | None, step: Callable[[Stored], Awaitable[Resource]]
    ) -> Resource:
        """Run a write ``step`` on the object's current state: first as last seen, and if that proves
        stale (a failed precondition), again on what the backend holds."""
        known = self._recent.get(self.key(info, name, namespace))
        if known is not None and known[1] is not None:
            try:
                return await step(known[1])
            except (Conflict, Forbidden, Invalid):
                pass  # perhaps decided on a stale copy: decide again on the stored object
        return await step(await self._current(info, name, namespace))

    async def _admit(self, actor: str | None, old: Resource | None, new: Resource | None) -> None:
        kind = new.kind if new is not None else old.kind if old is not None else ""
        if kind in self.admission:
            await self.admission.admit(Write(actor, old, new))

    # reads

    async def revision(self) -> int:
        return await self.backend.revision()

    async def get(self, kind: str | KindInfo, name: str, namespace: str | None = None) -> Resource:
        return (await self.read(kind, name, namespace)).decode()

    async def read(self, kind: str | KindInfo, name: str, namespace: str | None = None) -> Stored:
        """``get`` without decoding: the object's current state, shared (see ``Stored``)."""
        info = self.kind(kind)
        key = self.key(info, name, namespace)
        cached = self._cached(key)
        if cached is not None:
            if cached.state is None:
                raise NotFound(info.plural, name)
            return cached.state
        kv = await self.backend.get(key)
        if kv is None:
            raise NotFound(info.plural, name)
        return self._state(key, kv.mod_rev, kv.value, remember=True)

    def _cached(self, key: str) -> _Cached | None:
        """The state of ``key`` as the list cache holds it, when its kind is cached and the watch has
        published every change of it the backend committed, so that it is the state the backend holds
        (only where the backend can tell: see ``Backend.changed_after``)."""
        if not self._started or self.backend.changed_after(key, self._hub.last_rev) is not False:
            return None
        snapshot = self._lists.get(kind_prefix_of(key))
        return _Cached(snapshot.get(key)) if snapshot is not None else None

    async def count(self, kind: str | KindInfo, namespace: str | None = None) -> int:
        """How many objects of a kind there are (in ``namespace``), without reading them."""
        return await self.backend.count(self.kind_prefix(self.kind(kind), namespace))

    async def list(
        self,
        kind: str | KindInfo,
        namespace: str | None = None,
        *,
        where: Callable[[Resource], bool] | None = None,
        **selection: Unpack[Selection],
    ) -> ListResult[Resource]:
        """The objects of a kind that match the selectors and ``where``, in key order, a page at a time.

        A page ends at its last item and has a continue token only when a further item matches, so
        neither the token nor the page size says anything about objects ``where`` leaves out.
        """
        decoded: dict[str, Resource] = {}

        def keep(state: Stored) -> bool:
            obj = decoded[state.key] = state.decode()
            return where is None or where(obj)

        listed = await self.scan(kind, namespace, where=keep if where else None, **selection)
        items = [decoded.get(state.key) or state.decode() for state in listed.items]
        return ListResult(items, listed.resource_version, listed.continue_token)

    async def scan(
        self,
        kind: str | KindInfo,
        namespace: str | None = None,
        *,
        label_selector: str | LabelSelector | None = None,
        field_selector: str | FieldSelector | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        where: Callable[[Stored], bool] | None = None,
    ) -> ListResult[Stored]:
        """``list`` without decoding: the selected objects' states, in key order, shared (see ``Stored``)."""
        info = self.kind(kind)
        labels = _labels(label_selector)
        fields = _fields(field_selector, info)
        namespace = namespace or (fields.equal("metadata.namespace") if info.namespaced else None)
        prefix = self.kind_prefix(info, namespace)
        start_after, first_rev = _parse_continue(continue_token, prefix) if continue_token else (None, None)
        if limit is not None and limit <= 0:
            limit = None
        match = _Match(labels, fields, where)
        snapshot = await self._snapshot(info)
        if snapshot is None:
            return await self._scan_backend(prefix, match, limit, start_after, first_rev)
        rev = first_rev if first_rev is not None else max(snapshot.rev, self._hub.last_rev)
        # One item more than the page holds tells whether a further one matches.
        states = snapshot.states(prefix, start_after, labelled=labels.narrowing())
        items = match.select(states, None if limit is None else limit + 1)
        return _page(items, limit, rev)

    async def _scan_backend(
        self, prefix: str, match: _Match, limit: int | None, start_after: str | None, rev: int | None
    ) -> ListResult[Stored]:
        """``scan`` read from the backend, page by page (``rev``: the revision of an earlier page)."""
        items: list[Stored] = []
        page = 500 if limit is None else max(limit, 50)
        while True:
            kvs, read_rev = await self.backend.range(prefix, start_after=start_after, limit=page)
            rev = rev if rev is not None else read_rev
            # Remembered, so that the next list of these objects meets the same states (and what readers
            # derived from them) again.
            states = [self._state(kv.key, kv.mod_rev, kv.value, remember=True) for kv in kvs]
            items += match.select(states, None if limit is None else limit + 1 - len(items))
            if (limit is not None and len(items) > limit) or len(kvs) < page:
                return _page(items, limit, rev)
            start_after = kvs[-1].key

    async def _snapshot(self, info: KindInfo) -> KindSnapshot | None:
        """Every object of the kind, once the watch has caught up with the backend; None: read the backend."""
        prefix = self.kind_prefix(info)
        if not self._started or not self._lists.cap or prefix in self._lists.too_large:
            return None
        if not await self._hub.reached(await self.backend.revision(), _LIST_CACHE_WAIT):
            return None
        snapshot = self._lists.get(prefix)
        if snapshot is not None:
            return snapshot
        # Concurrent first lists of a kind share one load.
        loading = self._loading.get(prefix)
        if loading is None:
            loading = self._loading[prefix] = asyncio.ensure_future(self._load(prefix))
            loading.add_done_callback(lambda done: self._loaded(prefix, done))
        return await asyncio.shield(loading)

    async def _load(self, prefix: str) -> KindSnapshot | None:
        kvs, rev = await self.backend.range(prefix)
        snapshot = KindSnapshot(prefix, rev)
        for kv in kvs:
            snapshot.put(self._state(kv.key, kv.mod_rev, kv.value))
        # The watch went on while the backend was read: what it published after the read is applied.
        if self._hub.last_rev > rev:
            missed = self._hub.since(rev + 1)
            if missed is None:
                return None
            for change_rev, change in missed:
                if change.key.startswith(prefix):
                    snapshot.apply(change.key, change_rev, change.state)
        return snapshot if self._lists.install(snapshot) else None

    def _loaded(self, prefix: str, done: asyncio.Future[KindSnapshot | None]) -> None:
        self._loading.pop(prefix, None)
        if not done.cancelled():
            done.exception()  # retrieved here too: every list that waited for it may have gone

    # writes

    async def create(self, obj: Resource, *, actor: str | None = None, dry_run: bool = False) -> Resource:
        info = self.registry.for_object(obj)
        if obj.status is None and info.initial_status is not None:
            obj = obj.model_copy(update={"status": info.initial_status})
        obj = info.validate(obj)
        meta = obj.metadata
        if not meta.name and meta.generate_name:
            meta.name = meta.generate_name + _gen_suffix()
        if info.namespaced:
            await self._require_namespace(meta.namespace or "")
        meta.uid = str(uuid.uuid4())
        meta.creation_timestamp = now_rfc3339()
        meta.generation = 1
        meta.deletion_timestamp = None
        meta.resource_version = None
        await self._admit(actor, None, obj)
        key = self.key(info, obj.name, obj.namespace)
        value = self._encode(info, key, obj)
        if dry_run:
            if await self.backend.get(key) is not None:
                raise AlreadyExists(info.plural, obj.name)
            return obj
        try:
            rev = await self.backend.create(key, value)
        except KeyExists:
            raise AlreadyExists(info.plural, obj.name) from None
        # The watch hub may hold this state already (an embedded backend hands it each commit).
        self._state(key, rev, value, remember=True)
        if info is self._ns_kind:
            self._namespaces.add(obj.name)
        _writes("create", info.kind).inc()
        meta.resource_version = str(rev)
        return obj

    async def _require_namespace(self, namespace: str) -> None:
        if self._ns_kind is None or namespace in self._namespaces:
            return
        # Perhaps created through another replica a moment ago: ask the backend before refusing.
        if await self.backend.get(self.key(self._ns_kind, namespace, None)) is None:
            raise NotFound("namespaces", namespace)
        self._namespaces.add(namespace)

    async def update(self, obj: Resource, *, actor: str | None = None, dry_run: bool = False) -> Resource:
        """Replace an object's metadata and body; its status is kept (see ``update_status``).

        Without a resourceVersion the update is unconditional: a concurrent write is retried over.
        """
        info = self.registry.for_object(obj)
        step = functools.partial(self._update_step, info, obj, actor, dry_run)
        return await _retry_unless_conditional(
            bool(obj.metadata.resource_version),
            lambda: self._with_current(info, obj.name, obj.namespace, step),
        )

    async def _update_step(
        self, info: KindInfo, obj: Resource, actor: str | None, dry_run: bool, state: Stored
    ) -> Resource:
        # The stored object as JSON data, parsed for this write alone (a fifth of the cost of a model):
        # the new object takes its status and server-set metadata, and the checks that need the whole
        # object read the shared one.
        current: dict[str, Any] = pydantic_core.from_json(self._open(state.key, state.value))
        old = current["metadata"]
        _check_preconditions(info, obj, state.rev, old.get("uid"))
        kept = {field: old.get(field) for field in _SERVER_METADATA}
        new = info.validate(obj, override={"metadata": kept, "status": current.get("status")})
        meta = new.metadata
        body_changed = new.body() != {k: v for k, v in current.items() if k not in _NOT_BODY}
        meta.generation = (old.get("generation") or 1) + body_changed
        if old.get("deletionTimestamp") and not set(meta.finalizers) <= set(old.get("finalizers", ())):
            raise Invalid(
                f'{info.kind} "{obj.name}" is being deleted: metadata.finalizers: no new finalizers can be added'
            )
        if (old.get("annotations") or {}).get(CONTROLLER_ANNOTATION) not in (None, actor, SYSTEM):
            _check_owner(info, state.shared(), actor, new)
        if info.kind in self.admission:  # else the shared object need not be decoded
            await self._admit(actor, state.shared(), new)
        unchanged = not body_changed and _stored_form(new) == current
        return await self._replace(info, state, new, "update", dry_run, unchanged=unchanged)

    async def update_status(
        self,
        obj: Resource,
        *,
        actor: str | None = None,
        dry_run: bool = False,
        managed_fields: builtins.list[ManagedFieldsEntry] | None = None,
    ) -> Resource:
        """Replace an object's status only; metadata, spec and generation are kept, but for the
        ``managed_fields`` given (the API records there who wrote which part of the status)."""
        return await _retry_unless_conditional(
            bool(obj.metadata.resource_version), lambda: self._update_status(obj, dry_run, managed_fields)
        )

    async def _update_status(
        self, obj: Resource, dry_run: bool, managed_fields: builtins.list[ManagedFieldsEntry] | None
    ) -> Resource:
        info = self.registry.for_object(obj)

        async def step(state: Stored) -> Resource:
            # Decoded for this write alone: the new state may share its other parts.
            current = state.decode()
            _check_preconditions(info, obj, state.rev, current.metadata.uid)
            new = info.validate_status(current, obj.status)
            if managed_fields is not None:
                new.metadata = current.metadata.model_copy(update={"managed_fields": managed_fields})
            return await self._replace(info, state, new, "update_status", dry_run, unchanged=new == current)

        return await self._with_current(info, obj.name, obj.namespace, step)

    async def _replace(
        self, info: KindInfo, state: Stored, new: Resource, op: str, dry_run: bool, *, unchanged: bool
    ) -> Resource:
        """Write ``new`` over the stored ``state``; when ``unchanged`` (or on a dry run) there is no
        write, no event and no new resourceVersion, and ``new`` is returned as the state it equals."""
        if unchanged or dry_run:
            new.metadata.resource_version = str(state.rev)
            return new
        key = state.key
        try:
            if new.metadata.deletion_timestamp and not new.metadata.finalizers:
                value = None
                rev = await self.backend.remove(key, state.rev)
                op = "delete"
            else:
                value = self._encode(info, key, new)
                rev = await self.backend.replace(key, value, state.rev)
        except RevisionMismatch:
            raise _conflict(info, new.name) from None
        if value is None:
            self._deleted(key, rev)
        else:
            self._state(key, rev, value, remember=True)
        _writes(op, info.kind).inc()
        new.metadata.resource_version = str(rev)
        return new

    async def delete(
        self,
        kind: str | KindInfo,
        name: str,
        namespace: str | None = None,
        *,
        actor: str | None = None,
        resource_version: str | None = None,
        uid: str | None = None,
        dry_run: bool = False,
    ) -> Resource:
        """Delete an object: with finalizers it is only marked (deletionTimestamp) until they are gone.

        Returns the object as it now is: marked, or its last state (with the deletion's revision).
        """
        info = self.kind(kind)

        async def step(state: Stored) -> Resource:
            current = state.decode()
            if resource_version and resource_version != current.metadata.resource_version:
                raise _conflict(info, name)
            if uid and uid != current.metadata.uid:
                raise Conflict(f'{info.kind} "{name}": precondition failed: uid {uid} does not match')
            _check_owner(info, current, actor)
            if current.metadata.finalizers and current.metadata.deletion_timestamp:
                return current
            await self._admit(actor, current, None)
            if current.metadata.finalizers:
                marked = current.clone()
                marked.metadata.deletion_timestamp = now_rfc3339()
                return await self._replace(info, state, marked, "delete", dry_run, unchanged=False)
            if dry_run:
                return current
            try:
                rev = await self.backend.remove(state.key, state.rev)
            except RevisionMismatch:
                raise _conflict(info, name) from None
            self._deleted(state.key, rev)
            _writes("delete", info.kind).inc()
            current.metadata.resource_version = str(rev)
            return current

        return await _retry_unless_conditional(
            bool(resource_version), lambda: self._with_current(info, name, namespace, step)
        )

    # watch

    async def watch(
        self,
        kind: str | KindInfo | None = None,
        namespace: str | None = None,
        *,
        label_selector: str | LabelSelector | None = None,
        field_selector: str | FieldSelector | None = None,
        resource_version: int | str | None = None,
        send_initial_events: bool = False,
        bookmark_interval: float | None = None,
    ) -> AsyncGenerator[WatchEvent, None]:
        """Changes of one kind (or every kind) from after ``resource_version`` (or from now).

        With ``send_initial_events`` the current objects come first as ADDED. A resource version older
        than the retained history raises ``Gone``. With ``bookmark_interval``, a BOOKMARK carrying the
        current revision is sent whenever that many seconds pass without an event.
        """
        if not self._started:
            await self.start()
        info = self.kind(kind) if kind is not None else None
        labels, fields = _labels(label_selector), _fields(field_selector, info)
        if info is not None:
            namespace = namespace or (fields.equal("metadata.namespace") if info.namespaced else None)
            prefix = self.kind_prefix(info, namespace)
        else:
            prefix = "/"
        if send_initial_events:
            if info is None:
                raise Invalid("initial events need one kind")
            listed = await self.scan(info, namespace, label_selector=labels, field_selector=fields)
            for state in listed.items:
                yield WatchEvent("ADDED", state.decode(), state=state)
            from_rev = listed.resource_version + 1
        elif resource_version in (None, "", "0", 0):
            # The hub may not have seen the newest writes yet (etcd delivers them a little later).
            from_rev = max(self._hub.last_rev, await self.backend.revision()) + 1
        else:
            try:
                from_rev = int(resource_version) + 1
            except ValueError:
                raise Invalid(f"invalid resourceVersion {resource_version!r}: must be an integer") from None
        sub = self._hub.subscribe(from_rev, prefix)
        try:
            while True:
                batch = await sub.next_batch(bookmark_interval)
                if not batch:
                    if bookmark_interval is not None and info is not None:
                        yield _bookmark(info, sub.idle_revision)
                    continue
                for _, change in batch:
                    if not change.key.startswith(prefix):
                        continue
                    if (
                        namespace
                        and change.kind is not None
                        and change.kind.namespaced
                        and not change.key.startswith(self.kind_prefix(change.kind, namespace))
                    ):
                        continue
                    event = _filter(change, labels, fields)
                    if event is not None:
                        yield event
        finally:
            sub.close()


async def _retry_unless_conditional(
    conditional: bool, attempt: Callable[[], Awaitable[Resource]]
) -> Resource:
    """Run a write; one without a resourceVersion precondition is tried again when another writer
    got in first, as Kubernetes does, while a conditional one fails with the Conflict."""
    for _ in range(1 if conditional else _UNCONDITIONAL_ATTEMPTS - 1):
        try:
            return await attempt()
        except Conflict:
            if conditional:
                raise
    return await attempt()


@dataclass(frozen=True, slots=True)
class _Cached:
    state: Stored | None
    """None: there is no such object."""


@dataclass(frozen=True, slots=True)
class _Match:
    """What a list keeps: objects its selectors match and its ``where`` (if any) keeps."""

    labels: LabelSelector
    fields: FieldSelector
    where: Callable[[Stored], bool] | None

    def select(self, states: list[Stored], room: int | None) -> list[Stored]:
        """The states kept, in order, at most ``room`` of them."""
        labels, fields, where = self.labels, self.fields, self.where
        if labels.empty and not fields.terms:
            if where is None:
                return states[:room]
            if room is None:
                return [state for state in states if where(state)]
        selected = []
        for state in states:
            if (
                labels.matches(state.labels)
                and (not fields.terms or fields.matches(state.decode()))
                and (where is None or where(state))
            ):
                selected.append(state)
                if room is not None and len(selected) >= room:
                    break
        return selected


def _page(items: list[Stored], limit: int | None, rev: int) -> ListResult[Stored]:
    """At most ``limit`` items, with a continue token when one more was found."""
    if limit is None or len(items) <= limit:
        return ListResult(items, rev)
    return ListResult(items[:limit], rev, _make_continue(items[limit - 1].key, rev))


def _filter(change: Change, labels: LabelSelector, fields: FieldSelector) -> WatchEvent | None:
    def matches(obj: Resource | None) -> bool:
        return obj is not None and labels.matches(obj.metadata.labels) and fields.matches(obj)

    now, before = matches(change.obj), matches(change.prev)
    if now and change.obj is not None:
        if before:
            return WatchEvent("MODIFIED", change.obj, change.prev, change.state)
        return WatchEvent("ADDED", change.obj, state=change.state)
    if before and change.prev is not None:
        # Deleted, or changed so that it no longer matches: this watcher sees it go.
        if change.obj is not None:
            return WatchEvent("DELETED", change.obj, state=change.state)
        return WatchEvent("DELETED", change.prev)
    return None


def _bookmark(info: KindInfo, rev: int) -> WatchEvent:
    obj = Resource.model_validate({"apiVersion": info.api_version, "kind": info.kind, "metadata": {}})
    obj.metadata.resource_version = str(rev)
    return WatchEvent("BOOKMARK", obj)


def _labels(sel: str | LabelSelector | None) -> LabelSelector:
    return sel if isinstance(sel, LabelSelector) else LabelSelector.parse(sel)


def _fields(sel: str | FieldSelector | None, info: KindInfo | None) -> FieldSelector:
    if isinstance(sel, FieldSelector):
        return sel
    return FieldSelector.parse(sel, info.field_selectors if info is not None else ())


def _conflict(info: KindInfo, name: str) -> Conflict:
    return Conflict(
        f'Operation cannot be fulfilled on {info.plural} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )


def _check_preconditions(info: KindInfo, obj: Resource, rev: int, uid: str | None) -> None:
    """``obj``'s resourceVersion and uid, where it gives them, must be the stored object's."""
    if obj.metadata.resource_version and obj.metadata.resource_version != str(rev):
        raise _conflict(info, obj.name)
    if obj.metadata.uid and obj.metadata.uid != uid:
        raise Conflict(
            f'{info.kind} "{obj.name}": precondition failed: uid {obj.metadata.uid} does not match'
        )


def _stored_form(obj: Resource) -> dict[str, Any]:
    """The object as JSON data, as the store writes it (``_encode``)."""
    return obj.to_dict(exclude=_UNSTORED)


def _only_finalizers_differ(current: Resource, new: Resource) -> bool:
    a, b = current.to_dict(), new.to_dict()
    for data in (a, b):
        for field in ("finalizers", "generation", "resourceVersion", "managedFields"):
            data["metadata"].pop(field, None)
    return a == b


def _check_owner(info: KindInfo, current: Resource, actor: str | None, new: Resource | None = None) -> None:
    """Refuse a change (to ``new``, or a deletion) of a controller-owned object by anyone but its
    controller; a change of finalizers alone (with the managed fields recording it) is anyone's to make."""
    owner = current.metadata.annotations.get(CONTROLLER_ANNOTATION)
    if not owner or actor in (owner, SYSTEM):
        return
    if new is not None and _only_finalizers_differ(current, new):
        return
    ref = current.metadata.controller_ref()
    of = f" on behalf of {ref.kind} {ref.name!r}" if ref else ""
    where = f"{current.namespace}/{current.name}" if current.namespace else current.name
    raise Forbidden(
        f"{info.kind} {where!r} is managed by controller {owner}{of}: only that controller may change it"
    )


def _make_continue(last_key: str, rev: int) -> str:
    raw = json.dumps({"k": last_key, "rv": rev}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _parse_continue(token: str, prefix: str) -> tuple[str, int]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        key, rev = data["k"], int(data["rv"])
        if not isinstance(key, str) or not key.startswith(prefix):
            raise ValueError(key)
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError):
        raise Invalid(
            "invalid continue token: it does not belong to this list; list again without it"
        ) from None
    return key, rev


__all__ = [
    "CONTROLLER_ANNOTATION",
    "SYSTEM",
    "Change",
    "ListResult",
    "Store",
    "Stored",
    "UnknownKind",
    "WatchEvent",
]
