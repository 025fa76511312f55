"""Managed fields and server-side apply: which field manager owns which fields of an object.

Every write through the API records, in ``metadata.managedFields``, the fields its field manager set,
as Kubernetes does: an ``Apply`` entry per applier (``PATCH`` with ``application/apply-patch+yaml``)
and an ``Update`` entry per writer by other means (create, ``PUT``, merge, JSON and strategic merge
patches), each with its apiVersion, time and field set in ``FieldsV1`` notation, and the subresource
it wrote through. The manager is the request's ``fieldManager``, or the first part of its user agent.

Apply merges the applied configuration into the live object (``structured``), removes the fields the
applier applied before and no longer does unless another manager owns them, and refuses (409) to
change a field another manager owns unless forced, which moves the field to the applier. Updates
take the fields they change from everyone else, and removed fields leave every manager's set.

As in Kubernetes: a create records its writer; an update of an object nobody tracks yet (written by
herder itself, through the store) records nothing until the first apply, which gives everything the
object then has to ``before-first-apply``; more than ten ``Update`` entries fold their oldest into
``ancient-changes``; ``managedFields: [{}]`` in an update clears them; the identity and bookkeeping
fields of metadata belong to nobody; the main resource's managers never own ``status`` and the
status subresource's own nothing else; a ``kubectl`` apply keeps an existing
``kubectl.kubernetes.io/last-applied-configuration`` annotation in step with what it applied.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import TypeAdapter

from herder.krm import structured
from herder.krm.fieldpath import FieldSet, format_path
from herder.krm.status import ApiError
from herder.krm.structured import Shape
from herder.resources import FieldError, InvalidObject, KindInfo, ManagedFieldsEntry, ObjectMeta, Resource
from herder.resources import now_rfc3339 as now

Operation = Literal["Apply", "Update"]
APPLY: Operation = "Apply"
UPDATE: Operation = "Update"
BEFORE_FIRST_APPLY = "before-first-apply"
ANCIENT_CHANGES = "ancient-changes"
MAX_UPDATE_MANAGERS = 10
MAX_MANAGER_LENGTH = 128
KUBECTL = "kubectl"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
STATUS = "status"
_META = "f:metadata"
# What no manager owns: the object's identity and the server's bookkeeping.
_UNOWNED = FieldSet.of(
    ("f:apiVersion",),
    ("f:kind",),
    (_META,),
    *(
        (_META, "f:" + name)
        for name in (
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
            "selfLink",
        )
    ),
)


@dataclass(frozen=True)
class Manager:
    """A field manager's identity: its name, operation and subresource, and for updates the apiVersion
    (an applier stays the same manager whatever version it applies)."""

    name: str
    operation: Operation
    subresource: str = ""
    api_version: str = ""

    def describe(self, owned: Owned) -> str:
        """The manager as conflict messages name it."""
        out = json.dumps(self.name)
        if self.subresource:
            out += f" with subresource {json.dumps(self.subresource)}"
        if self.operation == UPDATE:
            out += f" using {owned.api_version}" + (f" at {owned.time}" if owned.time else "")
        return out


@dataclass(frozen=True)
class Owned:
    """What one manager owns, at which apiVersion, since when."""

    fields: FieldSet
    api_version: str
    time: str | None


Managers = dict[Manager, Owned]


def manager_of(field_manager: str | None, user_agent: str, options: str) -> str:
    """The manager of a write: its ``fieldManager``, else the user agent's product name (``kubectl`` for
    ``kubectl/v1.32.0 (linux/amd64)``), else ``unknown``. A name Kubernetes refuses is a 422 about the
    request's ``options`` (``CreateOptions``, ``UpdateOptions``, ``PatchOptions``)."""
    if field_manager:
        if len(field_manager) > MAX_MANAGER_LENGTH or not field_manager.isprintable():
            raise invalid_option(
                options,
                "fieldManager",
                f"must be at most {MAX_MANAGER_LENGTH} printable characters",
                "FieldValueInvalid",
            )
        return field_manager
    product = "".join(c for c in user_agent.split("/", 1)[0] if c.isprintable())
    return product[:MAX_MANAGER_LENGTH] or "unknown"


def invalid_option(options: str, option: str, message: str, reason: str) -> ApiError:
    """422 about one option of a write request, shaped as Kubernetes answers it."""
    return ApiError(
        422,
        f'{options}.meta.k8s.io "" is invalid: {option}: {message}',
        details={
            "group": "meta.k8s.io",
            "kind": options,
            "causes": [{"reason": reason, "message": message, "field": option}],
        },
    )


def _scoped(fields: FieldSet, subresource: str) -> FieldSet:
    """The part of a field set a manager of the main resource (or of status) can own."""
    out = FieldSet()
    for element, child in fields.children.items():
        if (element == "f:status") == (subresource == STATUS):
            out.children[element] = child.copy()
    return out.difference(_UNOWNED)


def _view(obj: dict[str, Any], subresource: str) -> dict[str, Any]:
    """The part of an object that writes through the main resource (or status) may change."""
    if subresource == STATUS:
        return {"status": obj["status"]} if obj.get("status") is not None else {}
    return {k: v for k, v in obj.items() if k != "status"}


def decode(kind: str, name: str, entries: list[ManagedFieldsEntry] | None) -> Managers:
    """The managers ``metadata.managedFields`` records; InvalidObject (422) naming what is malformed."""
    out: Managers = {}
    for i, entry in enumerate(entries or ()):
        where = f"metadata.managedFields[{i}]"
        if entry.operation is None:
            raise InvalidObject(kind, name, [FieldError(f"{where}.operation", "must be Apply or Update")])
        if entry.fields_type is None and entry.fields_v1 is not None:
            raise InvalidObject(kind, name, [FieldError(f"{where}.fieldsType", "must be FieldsV1")])
        try:
            fields = FieldSet.from_json(entry.fields_v1 or {})
        except ValueError as err:
            raise InvalidObject(kind, name, [FieldError(f"{where}.fieldsV1", str(err))]) from None
        manager = Manager(
            entry.manager or "",
            entry.operation,
            entry.subresource or "",
            entry.api_version or "" if entry.operation == UPDATE else "",
        )
        if manager in out:
            raise InvalidObject(
                kind,
                name,
                [FieldError(where, f"a second entry for manager {manager.name!r}", "FieldValueDuplicate")],
            )
        out[manager] = Owned(fields, entry.api_version or "", entry.time)
    return out


def _cap(managers: Managers) -> Managers:
    """At most ``MAX_UPDATE_MANAGERS`` Update entries: the oldest fold into ``ancient-changes``."""
    updaters = sorted((m for m in managers if m.operation == UPDATE), key=lambda m: managers[m].time or "")
    if len(updaters) <= MAX_UPDATE_MANAGERS:
        return managers
    folded = updaters[: len(updaters) - MAX_UPDATE_MANAGERS + 1]
    out = {m: o for m, o in managers.items() if m not in folded}
    fields = FieldSet()
    for m in folded:
        fields = fields.union(managers[m].fields)
    last = managers[folded[-1]]
    out[Manager(ANCIENT_CHANGES, UPDATE, api_version=last.api_version)] = Owned(
        fields, last.api_version, last.time
    )
    return out


def encode(managers: Managers) -> list[ManagedFieldsEntry]:
    """``metadata.managedFields`` for ``managers``, in Kubernetes' order (appliers first, then by time)."""
    entries = [
        ManagedFieldsEntry(
            manager=m.name,
            operation=m.operation,
            api_version=owned.api_version,
            time=owned.time,
            fields_type="FieldsV1",
            fields_v1=owned.fields.to_json(),
            subresource=m.subresource or None,
        )
        for m, owned in _cap(managers).items()
    ]
    entries.sort(
        key=lambda e: (
            e.operation or "",
            e.time or "",
            e.manager or "",
            e.api_version or "",
            e.subresource or "",
        )
    )
    return entries


def _is_reset(entries: list[ManagedFieldsEntry] | None) -> bool:
    return entries is not None and len(entries) == 1 and entries[0] == ManagedFieldsEntry()


def _update(
    shape: Shape,
    live: dict[str, Any],
    new: dict[str, Any],
    managers: Managers,
    manager: Manager,
    api_version: str,
) -> Managers:
    """``manager`` takes every field the update adds or changes; removed fields leave every manager."""
    comparison = structured.compare(_view(live, manager.subresource), _view(new, manager.subresource), shape)
    changed = _scoped(comparison.changed(), manager.subresource)
    removed = _scoped(comparison.removed, manager.subresource)
    out: Managers = {}
    for other, owned in managers.items():
        if other != manager:
            rest = owned.fields.difference(changed).difference(removed)
            if not rest.empty():
                out[other] = Owned(rest, owned.api_version, owned.time)
    previous = managers.get(manager)
    mine = (previous.fields if previous else FieldSet()).difference(removed).union(changed)
    if not mine.empty():
        time = previous.time if previous is not None and changed.empty() else now()
        out[manager] = Owned(mine, api_version, time)
    return out


class ApplyConflict(ApiError):
    """409: the apply would change fields other managers own. ``details.causes`` names each field and
    its manager, and the message reads as Kubernetes' does."""

    def __init__(self, conflicts: list[tuple[str, str]]) -> None:
        if len(conflicts) == 1:
            manager, path = conflicts[0]
            message = f"Apply failed with 1 conflict: conflict with {manager}: {path}"
        else:
            lines: list[str] = []
            for manager in sorted({m for m, _ in conflicts}):
                lines.append(f"conflicts with {manager}:")
                lines.extend(f"- {path}" for m, path in conflicts if m == manager)
            message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
        causes = [
            {"reason": "FieldManagerConflict", "message": f"conflict with {manager}", "field": path}
            for manager, path in conflicts
        ]
        super().__init__(409, message, reason="Conflict", details={"causes": causes})


class FieldManager:
    """Keeps ``metadata.managedFields`` on every write through the API, and carries out server-side apply.

    One per API server: it keeps each kind's merge shape, read from the kind's models once.
    """

    def __init__(self) -> None:
        self._shapes: dict[tuple[str, str, str], Shape] = {}

    def shape(self, info: KindInfo) -> Shape:
        """How objects of ``info`` merge, from the JSON schemas of its models."""
        key = (info.group, info.version, info.kind)
        shape = self._shapes.get(key)
        if shape is None:
            parts: dict[str, Shape] = {
                "apiVersion": Shape({"type": "string"}),
                "kind": Shape({"type": "string"}),
                "metadata": _model_shape(ObjectMeta.model_json_schema(by_alias=True)),
            }
            for name, model in (("spec", info.spec_model), ("status", info.status_model)):
                if model is not None:
                    parts[name] = _model_shape(model.model_json_schema(by_alias=True))
            for name, type_ in info.extra_fields.items():
                parts[name] = _model_shape(TypeAdapter(type_).json_schema(by_alias=True))
            shape = self._shapes[key] = Shape(fields=parts)
        return shape

    def updated(
        self, info: KindInfo, live: Resource | None, new: Resource, manager: str, subresource: str | None
    ) -> list[ManagedFieldsEntry] | None:
        """The managed fields ``new`` carries once ``manager`` wrote it over ``live`` (None: a create).

        Managed fields the writer sent replace the live ones first (unless it wrote a subresource), so
        that clients may edit them; None answers an update that leaves the object untracked.
        """
        sub = subresource or ""
        incoming = None if sub else new.metadata.managed_fields
        if _is_reset(incoming):
            return None
        base = incoming or (live.metadata.managed_fields if live is not None else None)
        managers = decode(info.kind, new.name, base)
        if not managers and live is not None:
            return None
        identity = Manager(manager, UPDATE, sub, info.api_version)
        after = _update(
            self.shape(info),
            live.to_dict() if live is not None else {},
            new.to_dict(),
            managers,
            identity,
            info.api_version,
        )
        return encode(after)

    def applied(
        self,
        info: KindInfo,
        live: Resource | None,
        config: dict[str, Any],
        manager: str,
        subresource: str | None,
        *,
        force: bool,
    ) -> dict[str, Any]:
        """The object (as JSON data, with its managed fields) that ``manager`` applying ``config`` to
        ``live`` (None: create it) makes; ApplyConflict (409) unless ``force``, 422 for an unmergeable
        configuration."""
        shape = self.shape(info)
        sub = subresource or ""
        name = str((config.get("metadata") or {}).get("name") or (live.name if live else ""))
        current = live.to_dict() if live is not None else {}
        managers = decode(info.kind, name, live.metadata.managed_fields if live is not None else None)
        if live is not None and not managers:
            empty = {"apiVersion": info.api_version, "kind": info.kind, "metadata": {}}
            first = Manager(BEFORE_FIRST_APPLY, UPDATE, sub, info.api_version)
            managers = _update(shape, empty, current, {}, first, info.api_version)
        before, applying = _view(current, sub), _view(config, sub)
        try:
            structured.check(applying, shape)
        except structured.ShapeError as err:
            field = format_path(err.path).lstrip(".")
            raise InvalidObject(info.kind, name, [FieldError(field, err.message)]) from None
        merged = structured.merge(before, applying, shape)
        applied_set = structured.field_set(applying, shape)
        identity = Manager(manager, APPLY, sub)
        previous = managers.get(identity)
        others = FieldSet()
        for m, owned in managers.items():
            if m != identity:
                others = others.union(owned.fields)
        if previous is not None:
            merged = structured.prune(
                merged, previous.fields, applied_set.union(others), shape, frozenset({_META})
            )
        comparison = structured.compare(before, merged, shape)
        changed = _scoped(comparison.changed(), sub)
        removed = _scoped(comparison.removed, sub)
        taken: dict[Manager, FieldSet] = {}
        for m, owned in managers.items():
            if m != identity:
                mine_now = owned.fields.intersection(changed)
                if not mine_now.empty():
                    taken[m] = mine_now
        refused = {} if force else taken
        if refused and manager == KUBECTL and live is not None and LAST_APPLIED in live.metadata.annotations:
            # kubectl's first server-side apply after client-side ones may take what those applied.
            allowed = _client_side_applied(shape, live, sub)
            refused = {m: s.difference(allowed) for m, s in refused.items()}
            refused = {m: s for m, s in refused.items() if not s.empty()}
        if refused:
            raise ApplyConflict(
                sorted(
                    (m.describe(managers[m]), format_path(p)) for m, s in refused.items() for p in s.leaves()
                )
            )
        after: Managers = {}
        for m, owned in managers.items():
            if m != identity:
                rest = owned.fields.difference(taken.get(m) or FieldSet()).difference(removed)
                if not rest.empty():
                    after[m] = Owned(rest, owned.api_version, owned.time)
        mine = _scoped(applied_set, sub)
        if not mine.empty():
            unchanged = (
                previous is not None
                and previous.fields.to_json() == mine.to_json()
                and changed.empty()
                and removed.empty()
            )
            after[identity] = Owned(
                mine, info.api_version, previous.time if unchanged and previous else now()
            )
        if sub == STATUS:
            result = dict(current)
            result.pop("status", None)
            result.update(merged)
        else:
            result = {**merged, **({"status": current["status"]} if "status" in current else {})}
            if manager == KUBECTL and LAST_APPLIED in (live.metadata.annotations if live else {}):
                _keep_last_applied(result, config)
        metadata = dict(result.get("metadata") or {})
        for field in ("uid", "resourceVersion", "creationTimestamp", "generation"):
            if field in current.get("metadata", {}):
                metadata.setdefault(field, current["metadata"][field])
        metadata["managedFields"] = [
            e.model_dump(mode="json", by_alias=True, exclude_none=True) for e in encode(after)
        ]
        result["metadata"] = metadata
        return result


def _model_shape(schema: dict[str, Any]) -> Shape:
    return Shape(schema, schema.get("$defs") or {})


def _client_side_applied(shape: Shape, live: Resource, subresource: str) -> FieldSet:
    """The fields kubectl's client-side apply last set (its annotation says) and nobody changed since."""
    try:
        last = json.loads(live.metadata.annotations[LAST_APPLIED])
    except ValueError:
        return FieldSet()
    if not isinstance(last, dict):
        return FieldSet()
    before, now_ = _view(last, subresource), _view(live.to_dict(), subresource)
    since = structured.compare(before, now_, shape).modified
    return _scoped(structured.field_set(before, shape), subresource).difference(since)


def _keep_last_applied(obj: dict[str, Any], config: dict[str, Any]) -> None:
    """Set the client-side apply annotation to what was applied, as kube-apiserver does for kubectl."""
    applied = json.loads(json.dumps(config))
    meta = applied.get("metadata") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != LAST_APPLIED}
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    metadata = obj.setdefault("metadata", {})
    metadata["annotations"] = {
        **(metadata.get("annotations") or {}),
        LAST_APPLIED: json.dumps(applied, separators=(",", ":")),
    }
