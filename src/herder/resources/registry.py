"""The kind registry: for each kind its API coordinates, typed models, printer columns and sensitivity.

A registry is an instance, not a global, so that one process can serve several APIs (herder's, and
the emulator's per-cluster Kubernetes API) with different kinds.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from herder.resources.errors import FieldError, InvalidObject, UnknownKind
from herder.resources.object import Resource

S = TypeVar("S", bound=BaseModel)
# Dots inside a key (a label such as herder.dev/cluster) are escaped with a backslash.
_PATH_SPLIT = re.compile(r"(?<!\\)\.")

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-.")
_NOT_IN_SEGMENT = frozenset("/%: \t")


def label_path(key: str) -> str:
    """The JSON path of a label, its dots escaped (``.metadata.labels.herder\\.dev/cluster``)."""
    return ".metadata.labels." + key.replace(".", "\\.")


@dataclass(frozen=True)
class PrinterColumn:
    """A column of ``kubectl get`` output; ``json_path`` is a dotted path such as ``.spec.version``."""

    name: str
    json_path: str
    type: str = "string"
    description: str = ""
    priority: int = 0
    compute: Callable[[dict[str, Any]], Any] | None = None
    """For cells no JSON path can express (a node's Ready state, a pod's ready containers), as the printers
    compiled into kube-apiserver compute them; ``json_path`` then names the field it reads."""

    def value(self, obj: dict[str, Any]) -> Any:
        if self.compute is not None:
            return self.compute(obj)
        cur: Any = obj
        for part in _PATH_SPLIT.split(self.json_path.lstrip(".")):
            part = part.replace("\\.", ".")
            if not isinstance(cur, dict):
                return None
            cur = cur.get(part)
        return cur


@dataclass(frozen=True)
class KindInfo:
    """Everything the system knows about one kind."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True
    spec_model: type[BaseModel] | None = None
    status_model: type[BaseModel] | None = None
    # Other top-level fields of the body (a ConfigMap's ``data``), validated by type.
    extra_fields: dict[str, Any] = field(default_factory=dict)
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    printer_columns: tuple[PrinterColumn, ...] = ()
    # The status a new object starts with when its creator gives none (a Namespace is Active).
    initial_status: dict[str, Any] | None = None
    # Sensitive kinds are encrypted at rest and readable only by the roles allowed to.
    sensitive: bool = False
    description: str = ""
    field_selectors: tuple[str, ...] = ()
    """Fields besides ``metadata.name`` and ``metadata.namespace`` that field selectors may use (a pod's
    ``spec.nodeName``), as each kind's field label conversion allows in Kubernetes."""
    names: Literal["subdomain", "path-segment"] = "subdomain"
    """What its objects' names may be: lowercase RFC 1123 subdomains (most kinds), or any path segment
    without ``/``, ``%``, ``:`` or spaces (people, named by their email as Kubernetes' User names are)."""
    prepare: Callable[[Resource], Resource] | None = None
    """The kind's own normalization of a valid object on every write (a Secret's ``stringData`` folded
    into ``data``), as a Kubernetes registry strategy does; it must be idempotent."""

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def has_status(self) -> bool:
        return self.status_model is not None

    def spec_of(self, obj: Resource, model: type[S]) -> S:
        """The object's spec as its typed model."""
        return model.model_validate(obj.spec or {})

    def validate(self, obj: Resource, *, override: Mapping[str, Any] | None = None) -> Resource:
        """Check the object against this kind; return a new copy with spec and status normalized.

        ``override`` gives top-level fields (for ``metadata``, fields of it) in wire form that the copy
        takes instead of ``obj``'s, as they are (None: absent): an update keeps the stored status and
        the metadata only the server sets. Raises ``InvalidObject`` naming every offending field.
        """
        override = override or {}
        causes: list[FieldError] = []
        name = obj.metadata.name or obj.metadata.generate_name or ""
        if obj.api_version != self.api_version:
            causes.append(FieldError("apiVersion", f"must be {self.api_version!r} for kind {self.kind}"))
        causes.extend(_check_name(obj, self.names))
        if self.namespaced and not obj.metadata.namespace:
            causes.append(FieldError("metadata.namespace", "is required", "FieldValueRequired"))
        if not self.namespaced and obj.metadata.namespace:
            causes.append(FieldError("metadata.namespace", f"kind {self.kind} is not namespaced"))
        updates: dict[str, Any] = {}
        for path, model, value in (
            ("spec", self.spec_model, obj.spec),
            ("status", self.status_model, obj.status),
        ):
            if path in override or (path == "status" and value is None):
                continue
            normalized = self._normalize(path, model, value, causes)
            if normalized is not None:
                updates[path] = normalized
        extra = dict(obj.model_extra or {})
        for key, value in extra.items():
            adapter = self.extra_fields.get(key)
            if adapter is None:
                causes.append(FieldError(key, "unknown field", "FieldValueNotSupported"))
                continue
            try:
                extra[key] = _adapter(adapter).validate_python(value)
            except ValidationError as err:
                causes.extend(_field_errors(key, err))
        if causes:
            raise InvalidObject(self.kind, name, causes)
        data = obj.__pydantic_serializer__.to_python(obj, by_alias=True, exclude_none=True)
        data.update(updates)
        data.update(extra)
        for part, given in override.items():
            if part == "metadata":
                data["metadata"].update(given)
            elif given is None:
                data.pop(part, None)
            else:
                data[part] = given
        valid = Resource.from_dict(data)
        return self.prepare(valid) if self.prepare is not None else valid

    def validate_status(self, obj: Resource, status: dict[str, Any] | None) -> Resource:
        """``obj`` (valid already) with ``status`` checked against the kind and normalized: a status write
        need not check and copy the rest of the object again. ``obj``'s other parts are shared."""
        causes: list[FieldError] = []
        normalized = (
            self._normalize("status", self.status_model, status, causes) if status is not None else None
        )
        if causes:
            raise InvalidObject(self.kind, obj.metadata.name or "", causes)
        valid = obj.model_copy(update={"status": normalized})
        return self.prepare(valid) if self.prepare is not None else valid

    def _normalize(
        self, path: str, model: type[BaseModel] | None, value: dict[str, Any] | None, causes: list[FieldError]
    ) -> dict[str, Any] | None:
        """``value`` (of ``spec`` or ``status``) as the kind's model normalizes it, or its faults in ``causes``;
        a kind without a model for it keeps an empty one as it is."""
        if model is None:
            if value:
                causes.append(FieldError(path, f"kind {self.kind} has no {path}", "FieldValueNotSupported"))
            return value
        try:
            # pydantic-core's own calls: the BaseModel methods around them cost as much again.
            dumped: dict[str, Any] = model.__pydantic_serializer__.to_python(
                model.__pydantic_validator__.validate_python(value or {}),
                mode="json",
                by_alias=True,
                exclude_none=True,
            )
        except ValidationError as err:
            causes.extend(_field_errors(path, err))
            return None
        return dumped


@functools.cache
def _adapter(annotation: Any) -> TypeAdapter[Any]:
    """A validator of one extra field's type, built once (building one costs far more than using it)."""
    return TypeAdapter(annotation)


def _check_name(obj: Resource, names: str = "subdomain") -> list[FieldError]:
    name = obj.metadata.name
    if not name:
        if obj.metadata.generate_name:
            return []
        return [FieldError("metadata.name", "is required", "FieldValueRequired")]
    if len(name) > 253:
        return [FieldError("metadata.name", "must be no more than 253 characters")]
    if names == "path-segment":
        if name in (".", "..") or any(c in _NOT_IN_SEGMENT or not c.isprintable() for c in name):
            return [
                FieldError(
                    "metadata.name",
                    f"{name!r}: a name may not be '.' or '..', nor hold '/', '%', ':' or white space",
                )
            ]
        return []
    if not set(name) <= _NAME_CHARS or not name[0].isalnum() or not name[-1].isalnum():
        return [
            FieldError(
                "metadata.name",
                f"{name!r}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character",
            )
        ]
    return []


def _field_errors(prefix: str, err: ValidationError) -> list[FieldError]:
    out = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        field_path = f"{prefix}.{loc}" if loc else prefix
        reason = {
            "missing": "FieldValueRequired",
            "extra_forbidden": "FieldValueNotSupported",
        }.get(e["type"], "FieldValueInvalid")
        # A validator's ValueError comes as "Value error, <its message>": the message is the reason.
        message = (
            "unknown field" if e["type"] == "extra_forbidden" else e["msg"].removeprefix("Value error, ")
        )
        out.append(FieldError(field_path, message, reason))
    return out


class KindRegistry:
    """The kinds one API serves, looked up by kind, plural, short name or apiVersion."""

    def __init__(self, kinds: Iterable[KindInfo] = ()) -> None:
        self._by_kind: dict[tuple[str, str], KindInfo] = {}
        # Lookups by plural (every stored key names one) and by any name (every request names one)
        # are dictionary reads: the store makes one per committed change.
        self._by_plural: dict[tuple[str, str], KindInfo] = {}
        self._by_name: dict[str, list[KindInfo]] = {}
        for info in kinds:
            self.register(info)

    def register(self, info: KindInfo) -> KindInfo:
        key = (info.group, info.kind)
        if key in self._by_kind:
            raise ValueError(f"kind {info.kind} of group {info.group!r} is already registered")
        self._by_kind[key] = info
        self._by_plural.setdefault((info.group, info.plural), info)
        for name in dict.fromkeys((info.kind.lower(), info.plural, info.singular, *info.short_names)):
            self._by_name.setdefault(name, []).append(info)
        return info

    def unregister(self, group: str, kind: str) -> KindInfo | None:
        """Stop serving a kind (a custom resource whose definition went); the kind removed, if it was known."""
        info = self._by_kind.pop((group, kind), None)
        if info is None:
            return None
        if self._by_plural.get((group, info.plural)) is info:
            del self._by_plural[(group, info.plural)]
        for name, infos in list(self._by_name.items()):
            kept = [i for i in infos if i is not info]
            if kept:
                self._by_name[name] = kept
            else:
                del self._by_name[name]
        return info

    def __iter__(self) -> Iterator[KindInfo]:
        return iter(self._by_kind.values())

    def __contains__(self, kind: str) -> bool:
        try:
            self.get(kind)
        except UnknownKind:
            return False
        return True

    def get(self, kind: str, group: str | None = None) -> KindInfo:
        """Find a kind by its name, plural, singular or short name (case-insensitive)."""
        want = kind.lower()
        if "." in want and group is None:
            want, _, group = want.partition(".")
        for info in self._by_name.get(want, ()):
            if group is None or info.group == group:
                return info
        raise UnknownKind(kind if group is None else f"{kind}.{group}")

    def for_object(self, obj: Resource) -> KindInfo:
        group = obj.api_version.rpartition("/")[0] if "/" in obj.api_version else ""
        info = self._by_kind.get((group, obj.kind))
        if info is None or info.api_version != obj.api_version:
            raise UnknownKind(f"{obj.api_version}/{obj.kind}")
        return info

    def find_plural(self, group: str, plural: str) -> KindInfo | None:
        """The kind of a group with this plural, if any."""
        return self._by_plural.get((group, plural))

    def by_plural(self, group: str, version: str, plural: str) -> KindInfo:
        info = self._by_plural.get((group, plural))
        if info is not None and info.version == version:
            return info
        raise UnknownKind(f"{plural}.{version}.{group}" if group else f"{plural}.{version}")

    def groups(self) -> dict[str, list[str]]:
        """Each API group with its versions (the core group is ``""``)."""
        out: dict[str, list[str]] = {}
        for info in self._by_kind.values():
            versions = out.setdefault(info.group, [])
            if info.version not in versions:
                versions.append(info.version)
        return out
