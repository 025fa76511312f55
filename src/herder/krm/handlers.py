"""The resource endpoints: GET, LIST, WATCH, POST, PUT, PATCH (server-side apply too), DELETE and
DELETE of a collection, for every registered kind.

A request path (``/api/v1/...`` or ``/apis/{group}/{version}/...``) is resolved to a ``Target``
against the kind registry, the caller is authenticated and authorized through the ``AccessPolicy``,
and the verb is carried out on the ``Store``. Objects the policy hides are answered exactly as
objects that do not exist. Every write records its field manager in ``metadata.managedFields``
(``fieldmanager``). Every outcome, success or ``Status`` error, is recorded with the policy.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response

from herder.krm import fieldmanager, media, patch, protobuf
from herder.krm.fieldmanager import FieldManager
from herder.krm.policy import Access, AccessPolicy, Denied, Identity
from herder.krm.status import ApiError, api_error, causes_of
from herder.krm.table import INCLUDE_OBJECT, Row, table
from herder.krm.watch import WatchStream, event_line
from herder.resources import InvalidObject, KindInfo, KindRegistry, Resource, UnknownKind
from herder.state.errors import AlreadyExists, Conflict, Forbidden, NotFound
from herder.state.selectors import FieldSelector, LabelSelector
from herder.state.store import Store, Stored, WatchEvent

log = logging.getLogger(__name__)

FIELD_VALIDATION = ("Strict", "Warn", "Ignore")
# How often an idle watch that allows bookmarks is sent one, and how long a watch lasts unless asked.
BOOKMARK_INTERVAL = 30.0
WATCH_TIMEOUT = 1800.0
# Writes retried when another writer got in between the read and the write.
WRITE_ATTEMPTS = 5
# The options object Kubernetes names in errors about each write method's query parameters.
_OPTIONS = {"POST": "CreateOptions", "PUT": "UpdateOptions", "PATCH": "PatchOptions"}


@dataclass(frozen=True)
class Target:
    """What a request path names: a kind, and perhaps a namespace, an object and a subresource."""

    info: KindInfo
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None


def resolve(registry: KindRegistry, group: str, version: str, path: str) -> Target:
    """Resolve the part of a path after its group version (``namespaces/ns/plural/name/status``)."""
    segments = path.split("/")
    if "" in segments:
        raise ApiError(404, "the server could not find the requested resource")
    namespace = None
    if (
        len(segments) >= 3
        and segments[0] == "namespaces"
        and _namespaced_plural(registry, group, version, segments[2])
    ):
        namespace, segments = segments[1], segments[2:]
    if len(segments) > 3:
        raise ApiError(404, "the server could not find the requested resource")
    try:
        info = registry.by_plural(group, version, segments[0])
    except UnknownKind as err:
        raise ApiError(404, f"the server could not find the requested resource ({err.what})") from None
    name = segments[1] if len(segments) > 1 else None
    subresource = segments[2] if len(segments) > 2 else None
    if subresource is not None and (subresource != "status" or not info.has_status):
        raise ApiError(404, f"{info.plural} has no subresource {subresource!r}")
    if info.namespaced and name is not None and namespace is None:
        raise ApiError(
            404, f"{info.plural} is namespaced: use /namespaces/{{namespace}}/{info.plural}/{name}"
        )
    return Target(info, namespace, name, subresource)


def _namespaced_plural(registry: KindRegistry, group: str, version: str, plural: str) -> bool:
    return any(
        k.plural == plural and k.namespaced for k in registry if (k.group, k.version) == (group, version)
    )


@dataclass
class Call:
    """One resource request on its way through: who asks, for what, and what they asked."""

    request: Request
    who: Identity
    access: Access
    target: Target
    changed: bool = True
    """False once a write found the object already as asked: nothing was stored (nor is it audited)."""

    @property
    def query(self) -> QueryParams:
        return self.request.query_params

    @property
    def info(self) -> KindInfo:
        return self.target.info

    @property
    def dry_run(self) -> bool:
        values = self.query.getlist("dryRun")
        for value in values:
            if value != "All":
                raise ApiError(400, f'invalid dryRun value {value!r}: the only supported value is "All"')
        return bool(values)

    @property
    def field_manager(self) -> str:
        """The writer's field manager: ``fieldManager``, or its user agent's product name."""
        return fieldmanager.manager_of(
            self.query.get("fieldManager"),
            self.request.headers.get("user-agent", ""),
            _OPTIONS.get(self.request.method, "PatchOptions"),
        )

    @property
    def field_validation(self) -> str:
        value = self.query.get("fieldValidation") or "Strict"
        for mode in FIELD_VALIDATION:
            if value.lower() == mode.lower():
                return mode
        raise ApiError(400, f"fieldValidation must be one of {', '.join(FIELD_VALIDATION)}, not {value!r}")


def _flag(query: QueryParams, name: str, default: bool = False) -> bool:
    value = query.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("1", "true"):
        return True
    if value.lower() in ("0", "false"):
        return False
    raise ApiError(400, f"{name} must be true or false, not {value!r}")


def _integer(query: QueryParams, name: str) -> int | None:
    value = query.get(name)
    if value is None or value == "":
        return None
    if not value.isdigit() or len(value) > 18:
        raise ApiError(400, f"{name} must be a non-negative integer, not {value!r}")
    return int(value)


def _selectors(query: QueryParams, info: KindInfo) -> tuple[LabelSelector, FieldSelector]:
    fields = FieldSelector.parse(query.get("fieldSelector"), info.field_selectors)
    return LabelSelector.parse(query.get("labelSelector")), fields


def _list_body(info: KindInfo, metadata: dict[str, str], items: list[bytes]) -> bytes:
    """A ``KindList`` of objects already encoded (``items`` is used up)."""
    head = media.dumps({"apiVersion": info.api_version, "kind": f"{info.kind}List", "metadata": metadata})
    head = head[:-1] + b',"items":['
    if not items:
        return head + b"]}"
    # One copy of a body that may run to megabytes: the head and tail ride on the first and last item.
    items[0] = head + items[0]
    items[-1] += b"]}"
    return b",".join(items)


def _drop(data: dict[str, Any], path: str) -> bool:
    """Remove the field at a dotted path (list indices as numbers); whether there was one."""
    *parents, last = path.split(".")
    cur: Any = data
    for part in parents:
        if isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        elif isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            return False
    if isinstance(cur, dict) and last in cur:
        del cur[last]
        return True
    return False


class ResourceAPI:
    """Every resource path: ``handle`` is the Starlette endpoint, taking ``group``, ``version``, ``path``."""

    def __init__(
        self,
        registry: KindRegistry,
        store: Store,
        policy: AccessPolicy,
        *,
        max_body_bytes: int,
        bookmark_interval: float = BOOKMARK_INTERVAL,
    ) -> None:
        self.registry = registry
        self.store = store
        self.policy = policy
        self.max_body_bytes = max_body_bytes
        self.bookmark_interval = bookmark_interval
        self.fields = FieldManager()

    async def handle(self, request: Request) -> Response:
        who: Identity | None = None
        access: Access | None = None
        target: Target | None = None
        call: Call | None = None
        try:
            who = await self.policy.authenticate(request)
            params = request.path_params
            target = resolve(self.registry, params.get("group", ""), params["version"], params["path"])
            verb, handler = self._route(request, target)
            access = Access(verb, target.info, target.namespace, target.name, target.subresource)
            call = Call(request, who, access, target)
            response = await handler(call)
            message = ""
        except Exception as exc:
            error = api_error(exc, target.info if target else None, target.name or "" if target else "")
            response, message = error.response(), error.message
        # A handler may have learnt more about the access (the name of a created object): record that.
        await self.policy.record(
            who,
            call.access if call else access,
            request,
            response.status_code,
            message,
            changed=call.changed if call else True,
        )
        return response

    def _route(self, request: Request, target: Target) -> tuple[str, Callable[[Call], Awaitable[Response]]]:
        method = request.method
        if target.name is None:
            if method == "GET":
                watch = _flag(request.query_params, "watch")
                return ("watch", self.watch) if watch else ("list", self.list_objects)
            if target.namespace or not target.info.namespaced:
                if method == "POST":
                    return "create", self.create
                if method == "DELETE":
                    return "deletecollection", self.delete_collection
        else:
            routes = {
                "GET": ("get", self.get),
                "PUT": ("update", self.update),
                "PATCH": ("patch", self.patch),
            }
            if target.subresource is None:
                routes["DELETE"] = ("delete", self.delete)
            if method in routes:
                return routes[method]
        raise ApiError(405, f"method {method} is not allowed on {request.url.path}")

    # reads

    async def _read(self, call: Call) -> tuple[Stored, Resource]:
        """The named object's state and the object, authorized; a hidden one is not found, as if it
        did not exist."""
        target = call.target
        assert target.name is not None
        # A caller who may not do this to any object of the kind is refused before the read, so that
        # refusals do not tell which names exist.
        self.policy.authorize(call.who, call.access)
        state = await self.store.read(target.info, target.name, target.namespace)
        obj = state.decode()
        if not self.policy.visible(call.who, target.info, obj.name, obj.metadata.labels):
            raise NotFound(target.info.plural, target.name)
        self.policy.authorize(call.who, call.access, obj)
        return state, obj

    async def _fetch(self, call: Call) -> Resource:
        """The named object, authorized, for the caller to change."""
        return (await self._read(call))[1]

    async def get(self, call: Call) -> Response:
        state, obj = await self._read(call)
        if media.negotiate(call.request.headers.get("accept")) == "table":
            return self._table(call, [(state, obj)], obj.metadata.resource_version or "")
        redact = self.policy.redaction(call.who, call.info)
        body = media.dump_resource(redact(obj)) if redact else _json_of(state, obj)
        return Response(body, media_type=media.JSON)

    async def list_objects(self, call: Call) -> Response:
        representation = media.negotiate(call.request.headers.get("accept"))
        self.policy.authorize(call.who, call.access)
        labels, fields = _selectors(call.query, call.info)
        result = await self.store.scan(
            call.info,
            call.target.namespace,
            label_selector=labels,
            field_selector=fields,
            limit=_integer(call.query, "limit"),
            continue_token=call.query.get("continue") or None,
            # Filtered in the store, so that pages and continue tokens say nothing of hidden objects.
            where=self._visible_to(call),
        )
        items = result.items
        rv = str(result.resource_version)
        if representation == "table":
            return self._table(call, [(s, None) for s in items], rv, result.continue_token)
        metadata: dict[str, str] = {"resourceVersion": rv}
        if result.continue_token:
            metadata["continue"] = result.continue_token
        redact = self.policy.redaction(call.who, call.info)
        if redact is not None:
            chunks = [media.dump_resource(redact(s.decode())) for s in items]
        else:
            chunks = [s.derived(_JSON, _encode) for s in items]  # _json_of's, without a call per item
        return Response(_list_body(call.info, metadata, chunks), media_type=media.JSON)

    def _visible_to(self, call: Call) -> Callable[[Stored], bool]:
        """Whether the caller may know of an object, decided from its state without decoding it."""
        visible, who, info = self.policy.visible, call.who, call.info
        return lambda state: visible(who, info, state.name, state.labels)

    async def watch(self, call: Call) -> Response:
        representation = media.negotiate(call.request.headers.get("accept"))
        self.policy.authorize(call.who, call.access)
        query = call.query
        labels, fields = _selectors(query, call.info)
        rv = query.get("resourceVersion") or ""
        if rv and not rv.isdigit():
            raise ApiError(400, f"invalid resourceVersion {rv!r}: must be an integer")
        explicit_initial = _flag(query, "sendInitialEvents")
        bookmarks = _flag(query, "allowWatchBookmarks")
        timeout = _integer(query, "timeoutSeconds") or WATCH_TIMEOUT
        # As in Kubernetes, a watch from no particular version starts with the current objects.
        initial: list[Stored] = []
        if explicit_initial or (rv in ("", "0") and "sendInitialEvents" not in query):
            listed = await self.store.scan(
                call.info,
                call.target.namespace,
                label_selector=labels,
                field_selector=fields,
                where=self._visible_to(call),
            )
            initial = listed.items
            rv = str(listed.resource_version)
        events = self.store.watch(
            call.info,
            call.target.namespace,
            label_selector=labels,
            field_selector=fields,
            resource_version=rv or None,
            bookmark_interval=self.bookmark_interval if bookmarks else None,
        )
        end_marker = rv if explicit_initial and bookmarks else None
        include = self._include_object(call) if representation == "table" else None
        lines = self._watch_lines(call, initial, end_marker, events, include)
        return WatchStream(lines, float(timeout))

    async def _watch_lines(
        self,
        call: Call,
        initial: list[Stored],
        end_marker: str | None,
        events: AsyncIterator[WatchEvent],
        table_include: str | None,
    ) -> AsyncIterator[bytes]:
        """The stream's lines; ``table_include`` set (see ``includeObject``) sends each object as a Table."""
        first = True
        redact = self.policy.redaction(call.who, call.info)

        def line(event_type: str, state: Stored | None, obj: Resource | None = None) -> bytes:
            """An event's line, from the object's ``state`` when it is the object at its own
            resourceVersion (a DELETED event may carry an earlier state stamped with a later one)."""
            nonlocal first
            if redact is not None:
                # Not the stored state's own encodings: the caller sees less of it.
                whole = obj if obj is not None else state.decode() if state is not None else None
                assert whole is not None
                obj, state = redact(whole), None
            if table_include is None:
                if state is not None:
                    return event_line(event_type, _json_of(state, obj))
                assert obj is not None
                return event_line(event_type, media.dump_resource(obj))
            if state is not None:
                row = _row_of(call.info, table_include, state, obj)
                rv = str(state.rev)
            else:
                assert obj is not None
                row = Row(call.info, obj.to_dict(), table_include)
                rv = obj.metadata.resource_version or ""
            rows = table(call.info, [row], resource_version=rv, headers=first)
            first = False
            return event_line(event_type, rows)

        if initial:
            # One chunk, not one write per object: a watch may start with thousands of them.
            yield b"".join(line("ADDED", state) for state in initial)
        if end_marker is not None:
            marker = self._bookmark(call.info, end_marker, {"k8s.io/initial-events-end": "true"})
            yield event_line("BOOKMARK", marker)
        try:
            async for event in events:
                if event.type == "BOOKMARK":
                    rv = event.object.metadata.resource_version
                    yield event_line(event.type, self._bookmark(call.info, rv))
                    continue
                now = self._sees(call, event.object)
                if event.previous is None or self._sees(call, event.previous) == now:
                    if now:
                        yield line(event.type, event.state, event.object)
                # A change moved the object into, or out of, what this caller may see: for them it
                # comes, or goes as they last saw it.
                elif now:
                    yield line("ADDED", event.state, event.object)
                else:
                    yield line("DELETED", None, event.previous)
        except Exception as exc:
            # The response has started: the error goes to the client as an ERROR event (an unexpected
            # one is logged, and shown only as an internal error).
            yield event_line("ERROR", media.dumps(api_error(exc, call.info).status()))

    def _sees(self, call: Call, obj: Resource) -> bool:
        return self.policy.visible(call.who, call.info, obj.name, obj.metadata.labels)

    @staticmethod
    def _bookmark(info: KindInfo, rv: str | None, annotations: dict[str, str] | None = None) -> bytes:
        metadata: dict[str, Any] = {"resourceVersion": rv or "0"}
        if annotations:
            metadata["annotations"] = annotations
        return media.dumps({"apiVersion": info.api_version, "kind": info.kind, "metadata": metadata})

    # writes

    async def _body(self, call: Call) -> dict[str, Any]:
        content_type = media.media_type(call.request.headers.get("content-type")) or media.JSON
        if content_type not in (media.JSON, media.YAML, "application/x-yaml", "text/yaml", protobuf.PROTOBUF):
            raise ApiError(
                415, f"unsupported media type {content_type!r}: send application/json or application/yaml"
            )
        body = await media.read_body(call.request, self.max_body_bytes)
        if content_type == protobuf.PROTOBUF:
            return protobuf.decode(body)
        return media.parse_object(body, content_type)

    def _decode(self, call: Call, data: dict[str, Any]) -> tuple[Resource, list[str]]:
        """The object a body describes, checked against the URL; with ``fieldValidation`` Ignore or Warn,
        unknown fields are dropped (and named in the returned warnings) instead of refused.
        """
        info, target = call.info, call.target
        data.setdefault("apiVersion", info.api_version)
        data.setdefault("kind", info.kind)
        if data["apiVersion"] != info.api_version:
            raise ApiError(
                400,
                f"the API version in the data ({data['apiVersion']}) does not match the expected API version "
                f"({info.api_version})",
            )
        if data["kind"] != info.kind:
            raise ApiError(
                400, f"the kind in the data ({data['kind']}) does not match the expected kind ({info.kind})"
            )
        metadata = data.setdefault("metadata", {})
        if not isinstance(metadata, dict):
            raise ApiError(400, "metadata must be an object")
        name = metadata.get("name")
        if target.name is not None and name not in (None, "", target.name):
            raise ApiError(
                400, f"the name of the object ({name}) does not match the name on the URL ({target.name})"
            )
        if target.name is not None:
            metadata["name"] = target.name
        if info.namespaced:
            namespace = metadata.get("namespace")
            if namespace not in (None, "", target.namespace):
                raise ApiError(
                    400,
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            metadata["namespace"] = target.namespace
        mode = call.field_validation
        warnings: list[str] = []
        while True:
            try:
                obj = Resource.from_dict(data)
                return (obj, warnings) if mode == "Strict" else (info.validate(obj), warnings)
            except InvalidObject as err:
                causes = err.causes
            except ValidationError as err:
                causes = causes_of(err)
            unknown = [c.field for c in causes if c.message == "unknown field"]
            if mode == "Strict" or len(unknown) != len(causes) or not all(_drop(data, f) for f in unknown):
                raise InvalidObject(info.kind, str(name or ""), causes)
            if mode == "Warn":
                warnings.extend(f'unknown field "{f}"' for f in unknown)

    def _authorize_write(self, call: Call, current: Resource | None, new: Resource) -> None:
        """Writes are authorized against the object as it is and as it would become, then as a change."""
        if current is not None:
            self.policy.authorize(call.who, call.access, current)
        self.policy.authorize(call.who, call.access, new)
        self.policy.admit(call.who, call.access, current, new)

    def _tracked(self, call: Call, current: Resource | None, obj: Resource) -> Resource:
        """``obj`` validated, carrying the managed fields its write records for the caller's manager.

        A status write changes nothing but status (and its managers): the rest is the current object's,
        with the preconditions ``obj`` named.
        """
        info, sub = call.info, call.target.subresource
        if sub == "status" and current is not None:
            meta = current.metadata.model_copy(
                update={"resource_version": obj.metadata.resource_version, "uid": obj.metadata.uid}
            )
            obj = current.model_copy(update={"status": obj.status, "metadata": meta})
        new = info.validate(obj)
        new.metadata.managed_fields = self.fields.updated(info, current, new, call.field_manager, sub)
        return new

    async def create(self, call: Call) -> Response:
        obj, warnings = self._decode(call, await self._body(call))
        if obj.name:
            call.access = replace(call.access, name=obj.name)
        self._authorize_write(call, None, obj)
        return await self._create(call, self._tracked(call, None, obj), warnings)

    async def _create(self, call: Call, obj: Resource, warnings: list[str]) -> Response:
        created = await self.store.create(obj, actor=self.policy.actor(call.who), dry_run=call.dry_run)
        return self._json(call, created, 201, warnings)

    async def _save(self, call: Call, obj: Resource) -> Resource:
        actor = self.policy.actor(call.who)
        if call.target.subresource == "status":
            return await self.store.update_status(
                obj, actor=actor, dry_run=call.dry_run, managed_fields=obj.metadata.managed_fields
            )
        return await self.store.update(obj, actor=actor, dry_run=call.dry_run)

    async def _write(
        self,
        call: Call,
        change: Callable[[Resource], tuple[Resource, list[str]]],
        *,
        tracked: bool = False,
        create: Callable[[], Awaitable[Response]] | None = None,
    ) -> Response:
        """Write ``change(current)`` over the current object. It applies to exactly the object it was
        made from: when another writer got in between, it is made again from the new one, unless the
        request named the resourceVersion it expects. ``tracked``: ``change`` records managed fields
        itself (an apply); ``create``: what to do instead when there is no object."""
        for attempt in range(WRITE_ATTEMPTS):
            try:
                current = await self._fetch(call)
            except NotFound:
                if create is None:
                    raise
                try:
                    return await create()
                except AlreadyExists:
                    if attempt == WRITE_ATTEMPTS - 1:
                        raise
                    continue  # created by someone else meanwhile: apply to theirs
            obj, warnings = change(current)
            obj.metadata.resource_version = obj.metadata.resource_version or current.metadata.resource_version
            self._authorize_write(call, current, obj)
            if not tracked:
                obj = self._tracked(call, current, obj)
            try:
                saved = await self._save(call, obj)
            except Conflict:
                if (
                    obj.metadata.resource_version != current.metadata.resource_version
                    or attempt == WRITE_ATTEMPTS - 1
                ):
                    raise
                continue
            call.changed = (
                call.dry_run or saved.metadata.resource_version != current.metadata.resource_version
            )
            return self._json(call, saved, 200, warnings)
        raise AssertionError("unreachable")

    async def update(self, call: Call) -> Response:
        obj, warnings = self._decode(call, await self._body(call))
        return await self._write(call, lambda current: (obj.clone(), warnings))

    async def patch(self, call: Call) -> Response:
        content_type = media.media_type(call.request.headers.get("content-type"))
        body = await media.read_body(call.request, self.max_body_bytes)
        if content_type == patch.APPLY:
            return await self.apply(call, body)
        if "force" in call.query:
            raise fieldmanager.invalid_option(
                "PatchOptions",
                "force",
                "Forbidden: may not be specified for non-apply patch",
                "FieldValueForbidden",
            )
        change = patch.Patch(call.info, content_type, body)

        def patched(current: Resource) -> tuple[Resource, list[str]]:
            data = change.apply(current.to_dict())
            if not isinstance(data, dict):
                raise ApiError(422, "the patched document is not an object")
            return self._decode(call, data)

        return await self._write(call, patched)

    async def apply(self, call: Call, body: bytes) -> Response:
        """Server-side apply: ``body`` (YAML or JSON) is the caller's configuration of the object, merged
        into it under the caller's field manager, or created when there is no object (authorized as a
        create too)."""
        if not call.query.get("fieldManager"):
            raise fieldmanager.invalid_option(
                "PatchOptions",
                "fieldManager",
                "Required value: is required for apply patch",
                "FieldValueRequired",
            )
        config = media.parse_object(body, media.YAML)
        self._check_apply_config(call, config)
        manager, force, sub = call.field_manager, _flag(call.query, "force"), call.target.subresource

        def applied(current: Resource | None) -> tuple[Resource, list[str]]:
            data = self.fields.applied(call.info, current, config, manager, sub, force=force)
            return self._decode(call, data)

        async def create() -> Response:
            obj, warnings = applied(None)
            self._authorize_write(call, None, obj)
            self.policy.authorize(call.who, replace(call.access, verb="create"), obj)
            return await self._create(call, obj, warnings)

        return await self._write(call, applied, tracked=True, create=None if sub else create)

    @staticmethod
    def _check_apply_config(call: Call, config: dict[str, Any]) -> None:
        info = call.info
        if not config.get("apiVersion") or not config.get("kind"):
            raise ApiError(
                400,
                f"an apply configuration must name its apiVersion ({info.api_version}) and kind ({info.kind})",
            )
        metadata = config.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            raise ApiError(400, "metadata must be an object")
        if metadata and metadata.get("managedFields") is not None:
            raise ApiError(400, "metadata.managedFields must be nil: an apply configuration cannot set them")

    async def _delete_options(self, call: Call) -> tuple[dict[str, Any], bool]:
        """The preconditions of a DELETE's options body, and whether it is a dry run."""
        options: dict[str, Any] = {}
        raw = await media.read_body(call.request, self.max_body_bytes)
        if raw.strip():
            options = media.parse_object(raw, media.JSON)
        preconditions = options.get("preconditions") or {}
        dry_run = options.get("dryRun") or []
        if (
            not isinstance(preconditions, dict)
            or not isinstance(dry_run, list)
            or any(v != "All" for v in dry_run)
        ):
            raise ApiError(
                400, "invalid DeleteOptions: preconditions must be an object, dryRun a list of All"
            )
        return preconditions, call.dry_run or bool(dry_run)

    async def delete(self, call: Call) -> Response:
        preconditions, dry_run = await self._delete_options(call)
        await self._fetch(call)
        target = call.target
        assert target.name is not None
        deleted = await self.store.delete(
            call.info,
            target.name,
            target.namespace,
            actor=self.policy.actor(call.who),
            resource_version=preconditions.get("resourceVersion") or None,
            uid=preconditions.get("uid") or None,
            dry_run=dry_run,
        )
        return self._json(call, deleted)

    async def delete_collection(self, call: Call) -> Response:
        """Delete every object the selectors match that the caller may see and delete; answer the list
        of them as they now are (gone, or marked for deletion). Objects the caller sees but may not
        delete stay, each named in a ``Warning``; hidden ones are neither touched nor counted."""
        _, dry_run = await self._delete_options(call)
        self.policy.authorize(call.who, call.access)
        labels, fields = _selectors(call.query, call.info)
        listed = await self.store.list(
            call.info,
            call.target.namespace,
            label_selector=labels,
            field_selector=fields,
            where=lambda obj: self._sees(call, obj),
        )
        deleted: list[Resource] = []
        warnings: list[str] = []
        for obj in listed.items:
            try:
                self.policy.authorize(call.who, replace(call.access, name=obj.name), obj)
                deleted.append(
                    await self.store.delete(
                        call.info,
                        obj.name,
                        obj.namespace,
                        actor=self.policy.actor(call.who),
                        uid=obj.metadata.uid,
                        dry_run=dry_run,
                    )
                )
            except (Denied, Forbidden) as err:
                warnings.append(f'{call.info.plural} "{obj.name}" was not deleted: {err}')
            except (NotFound, Conflict):
                continue  # deleted, or replaced by another object of its name, since the list
        metadata = {"resourceVersion": str(listed.resource_version)}
        redact = self.policy.redaction(call.who, call.info) or (lambda obj: obj)
        body = _list_body(call.info, metadata, [media.dump_resource(redact(obj)) for obj in deleted])
        return self._with_warnings(Response(body, media_type=media.JSON), warnings)

    # rendering

    def _json(
        self, call: Call, obj: Resource, status: int = 200, warnings: list[str] | None = None
    ) -> Response:
        redact = self.policy.redaction(call.who, call.info)
        shown = redact(obj) if redact is not None else obj
        return self._with_warnings(
            Response(media.dump_resource(shown), status, media_type=media.JSON), warnings
        )

    @staticmethod
    def _with_warnings(response: Response, warnings: list[str] | None) -> Response:
        for warning in warnings or ():
            quoted = warning.replace("\\", "\\\\").replace('"', '\\"')
            response.headers.append("Warning", f'299 - "{quoted}"')
        return response

    def _include_object(self, call: Call) -> str:
        include = call.query.get("includeObject") or "Metadata"
        if include not in INCLUDE_OBJECT:
            raise ApiError(400, f"includeObject must be one of {', '.join(INCLUDE_OBJECT)}, not {include!r}")
        return include

    def _table(
        self,
        call: Call,
        objects: list[tuple[Stored, Resource | None]],
        rv: str,
        continue_token: str | None = None,
    ) -> Response:
        """A Table of objects' states (with each one's decoding, where it is at hand)."""
        include = self._include_object(call)
        redact = self.policy.redaction(call.who, call.info)
        if redact is not None:
            rows = [
                Row(call.info, redact(obj if obj is not None else state.decode()).to_dict(), include)
                for state, obj in objects
            ]
        else:
            rows = [_row_of(call.info, include, state, obj) for state, obj in objects]
        body = table(call.info, rows, resource_version=rv, continue_token=continue_token)
        return Response(body, media_type=media.JSON)


# The name under which an object state's JSON is kept with it (see ``Stored.derived``).
_JSON = "json"


def _encode(state: Stored) -> bytes:
    return media.dump_resource(state.decode())


def _json_of(state: Stored, obj: Resource | None = None) -> bytes:
    """The JSON of an object's stored state, made once per state (from ``obj``, its decoding, if at hand)."""
    return state.derived(_JSON, _encode if obj is None else lambda _: media.dump_resource(obj))


def _row_of(info: KindInfo, include: str, state: Stored, obj: Resource | None = None) -> Row:
    """The Table row of an object's stored state, made once per state and ``includeObject``."""

    def make(state: Stored) -> Row:
        return Row(info, (obj if obj is not None else state.decode()).to_dict(), include)

    return state.derived(f"table-row:{include}", make)
