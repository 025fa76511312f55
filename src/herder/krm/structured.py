"""Structured merging of JSON objects, as Kubernetes' structured-merge-diff does it for server-side apply.

A ``Shape`` says how a node of an object merges, read from the kind's JSON schema: objects with
declared fields (structs) and maps merge key by key; lists are atomic (replaced whole) unless the
schema declares ``x-kubernetes-list-type: map`` with ``x-kubernetes-list-map-keys`` (items merged by
those keys) or ``set`` (unique scalars merged as a set); ``x-kubernetes-map-type: atomic`` makes an
object a leaf. Where the schema says nothing (``dict[str, Any]``), shapes are deduced as Kubernetes
does for schemaless data: objects are maps of anything, lists atomic.

On that, the four operations server-side apply is made of: the field set of a value (``field_set``),
what changed between two values (``compare``), an applied configuration merged over a live value
(``merge``), and removing what an applier gave up (``prune``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from herder.krm import fieldpath
from herder.krm.fieldpath import FieldSet, Path

Kind = Literal["struct", "map", "list", "scalar", "any"]
_SCALARS = frozenset({"string", "integer", "number", "boolean"})


def _resolve(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    """Follow ``$ref``, one-element ``allOf`` and nullable ``anyOf`` to the schema that types a node,
    keeping the ``x-kubernetes-`` extensions written beside them."""
    extensions = {k: v for k, v in schema.items() if k.startswith("x-kubernetes-")}
    inner: Mapping[str, Any] | None = None
    if "$ref" in schema:
        inner = defs.get(str(schema["$ref"]).rsplit("/", 1)[-1], {})
    elif len(schema.get("allOf") or ()) == 1:
        inner = schema["allOf"][0]
    elif "anyOf" in schema:
        variants = [v for v in schema["anyOf"] if v != {"type": "null"}]
        inner = variants[0] if len(variants) == 1 else {}
    if inner is None:
        return schema
    return {**_resolve(inner, defs), **extensions}


class Shape:
    """How one node of an object merges; its children's shapes are read from the schema on demand."""

    def __init__(
        self,
        schema: Mapping[str, Any] | None = None,
        defs: Mapping[str, Any] | None = None,
        fields: Mapping[str, Shape] | None = None,
    ) -> None:
        """``schema`` is a JSON schema node and ``defs`` the ``$defs`` its references name; ``fields``
        declares a struct's fields directly (the top of an object, whose parts have schemas of their own)."""
        self._defs = defs or {}
        node = _resolve(schema or {}, self._defs)
        self._node = node
        self._fields: dict[str, Shape] = dict(fields or {})
        self._declared = frozenset(self._fields) | frozenset(node.get("properties") or ())
        self.kind: Kind
        if fields is not None or "properties" in node:
            self.kind = "struct"
        elif node.get("type") == "object" or "additionalProperties" in node:
            self.kind = "map"
        elif node.get("type") == "array":
            self.kind = "list"
        elif node.get("type") in _SCALARS or "enum" in node:
            self.kind = "scalar"
        else:
            self.kind = "any"
        list_type = node.get("x-kubernetes-list-type", "atomic")
        self.list_type: str = list_type if self.kind == "list" else "atomic"
        self.keys: tuple[str, ...] = tuple(node.get("x-kubernetes-list-map-keys") or ())
        if self.list_type == "map" and not self.keys:
            self.list_type = "atomic"
        self.atomic = node.get("x-kubernetes-map-type") == "atomic"
        self._item: Shape | None = None

    def declared(self, name: str) -> bool:
        """Whether ``name`` is a declared field of a struct (not a map's key or an undeclared field)."""
        return name in self._declared

    def child(self, name: str) -> Shape:
        """The shape of an object's field or a map's value."""
        shape = self._fields.get(name)
        if shape is None:
            if self.kind == "struct" and name in self._declared:
                shape = Shape(self._node["properties"][name], self._defs)
            else:
                extra = self._node.get("additionalProperties")
                shape = Shape(extra, self._defs) if isinstance(extra, dict) else ANY
            self._fields[name] = shape
        return shape

    @property
    def item(self) -> Shape:
        """The shape of a list's items."""
        if self._item is None:
            items = self._node.get("items")
            self._item = Shape(items, self._defs) if isinstance(items, dict) else ANY
        return self._item


ANY = Shape()


class ShapeError(ValueError):
    """An applied configuration that cannot be merged: a keyed list item without its keys, or twice."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"{fieldpath.format_path(path)}: {message}")
        self.path = path
        self.message = message


@dataclass(frozen=True)
class _Child:
    element: str
    at: str | int  # the key in its map or the index in its list
    value: Any
    shape: Shape
    declared: bool


def _keyed(items: list[Any], shape: Shape, path: Path, strict: bool) -> list[_Child] | None:
    """A keyed list's items with their path elements; None (or ShapeError when ``strict``) when an item
    cannot be keyed, and the list is then handled as atomic."""
    out, seen = [], set()
    for i, item in enumerate(items):
        if shape.list_type == "map":
            missing = next((k for k in shape.keys if not isinstance(item, dict) or k not in item), None)
            if missing is not None:
                if strict:
                    raise ShapeError(
                        path,
                        f'element {i}: associative list with keys has an element that omits key field "{missing}"',
                    )
                return None
            element = fieldpath.key(item, shape.keys)
        else:
            if isinstance(item, dict | list):
                if strict:
                    raise ShapeError(path, f"element {i}: the items of a set must be scalars")
                return None
            element = fieldpath.value(item)
        if element in seen:
            if strict:
                raise ShapeError(path, f"duplicate entries for key {fieldpath.format_path((element,))}")
            return None
        seen.add(element)
        out.append(_Child(element, i, item, shape.item, False))
    return out


def _children(value: Any, shape: Shape, path: Path = (), strict: bool = False) -> list[_Child] | None:
    """The parts of ``value`` that merge one by one, or None when it is a leaf (scalar or atomic)."""
    if isinstance(value, dict) and shape.kind in ("struct", "map", "any") and not shape.atomic:
        return [_Child(fieldpath.field(k), k, v, shape.child(k), shape.declared(k)) for k, v in value.items()]
    if isinstance(value, list) and shape.list_type != "atomic":
        return _keyed(value, shape, path, strict)
    return None


def same(a: Any, b: Any) -> bool:
    """JSON equality (Python's ``==`` holds ``True == 1``)."""
    if type(a) is not type(b):
        numbers = (int, float)
        return (
            isinstance(a, numbers)
            and isinstance(b, numbers)
            and not isinstance(a, bool)
            and not isinstance(b, bool)
            and a == b
        )
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))
    return bool(a == b)


def check(config: Any, shape: Shape, path: Path = ()) -> None:
    """Raise ShapeError where an applied configuration's keyed lists cannot be merged."""
    for child in _children(config, shape, path, strict=True) or ():
        check(child.value, child.shape, (*path, child.element))


def field_set(value: Any, shape: Shape) -> FieldSet:
    """The fields ``value`` sets: what an applier of it owns."""
    out = FieldSet()
    _to_set(value, shape, (), out)
    return out


def _to_set(value: Any, shape: Shape, path: Path, out: FieldSet) -> None:
    children = _children(value, shape) if value is not None else None
    if children is None:
        out.insert(path)
        return
    for child in children:
        sub = (*path, child.element)
        _to_set(child.value, child.shape, sub, out)
        # As structured-merge-diff: a map's key or an undeclared field is owned itself, besides what
        # is below it; a declared field only through its contents (unless it is empty).
        if child.value is None or child.value == {} or not child.declared:
            out.insert(sub)


@dataclass
class Comparison:
    """The paths added, modified and removed between two values."""

    added: FieldSet = field(default_factory=FieldSet)
    modified: FieldSet = field(default_factory=FieldSet)
    removed: FieldSet = field(default_factory=FieldSet)

    def changed(self) -> FieldSet:
        """Added or modified: the fields someone else must not own without a conflict."""
        return self.added.union(self.modified)


def compare(lhs: Any, rhs: Any, shape: Shape) -> Comparison:
    out = Comparison()
    _compare(lhs, rhs, shape, (), out)
    return out


def _compare(lhs: Any, rhs: Any, shape: Shape, path: Path, out: Comparison) -> None:
    if lhs is None and rhs is None:
        return
    left = _children(lhs, shape) if lhs is not None else None
    right = _children(rhs, shape) if rhs is not None else None
    containers = (lhs is None or left is not None) and (rhs is None or right is not None)
    if not containers or (not left and not right):
        if lhs is None:
            out.added.insert(path)
        elif rhs is None:
            out.removed.insert(path)
        elif not same(lhs, rhs):
            out.modified.insert(path)
        return
    before = {c.element: c for c in left or ()}
    after = {c.element: c for c in right or ()}
    for element in [*before, *(e for e in after if e not in before)]:
        old, new = before.get(element), after.get(element)
        child_shape = (new or old).shape  # type: ignore[union-attr]
        _compare(old.value if old else None, new.value if new else None, child_shape, (*path, element), out)
    if lhs is None:
        out.added.insert(path)
    elif rhs is None:
        out.removed.insert(path)


def merge(lhs: Any, rhs: Any, shape: Shape) -> Any:
    """``rhs`` (an applied configuration) merged over ``lhs``; a ``null`` in ``rhs`` removes the field."""
    right = _children(rhs, shape)
    left = _children(lhs, shape) if lhs is not None else []
    if right is None or left is None:
        return rhs
    if isinstance(rhs, dict):
        out = dict(lhs) if isinstance(lhs, dict) else {}
        for child in right:
            assert isinstance(child.at, str)
            if child.value is None:
                out.pop(child.at, None)
            else:
                out[child.at] = merge(out.get(child.at), child.value, child.shape)
        return out
    return _merge_items(left, right)


def _merge_items(left: list[_Child], right: list[_Child]) -> list[Any]:
    """A keyed list merged as structured-merge-diff orders it: live items in their places, applied ones
    in the applied order, the items both have merged where the applied list puts them."""
    live = {c.element: c for c in left}
    applied = {c.element: c for c in right}
    shared = [c.element for c in right if c.element in live]
    upcoming = iter([*shared[1:], None])
    next_shared = shared[0] if shared else None
    out: list[Any] = []
    done: set[str] = set()
    i = j = 0

    def take(element: str) -> None:
        done.add(element)
        old = live.get(element)
        out.append(merge(old.value if old else None, applied[element].value, applied[element].shape))

    while i < len(left) or j < len(right):
        if i < len(left) and j < len(right):
            element = left[i].element
            if element == right[j].element:
                take(element)
                i, j = i + 1, j + 1
                next_shared = next(upcoming, None)
                continue
            if element in applied and next_shared is not None and next_shared != element:
                i += 1  # an item both have, but not the one the applied order wants next
                continue
        if i < len(left):
            element = left[i].element
            if element not in applied:
                out.append(left[i].value)
                i += 1
                continue
            if element in done:
                i += 1
        if j < len(right):
            element = right[j].element
            take(element)
            j += 1
            if element == next_shared:
                next_shared = next(upcoming, None)
    return out


def prune(value: Any, last: FieldSet, keep: FieldSet | None, shape: Shape, protected: frozenset[str]) -> Any:
    """``value`` without the fields an applier owned (``last``) that nobody owns any more (``keep``: the
    applier's new fields and everyone else's). A field goes with everything below it, unless something
    below it is kept; ``protected`` elements of the top level are never removed whole."""
    children = _children(value, shape)
    if children is None:
        return value
    dropped: set[str | int] = set()
    changed: dict[str | int, Any] = {}
    for child in children:
        mine = last.get(child.element)
        if mine is None:
            continue
        theirs = keep.get(child.element) if keep is not None else None
        if theirs is None and child.element not in protected:
            dropped.add(child.at)
        elif mine.children:
            pruned = prune(child.value, mine, theirs, child.shape, frozenset())
            if pruned is not child.value:
                changed[child.at] = pruned
    if not dropped and not changed:
        return value
    if isinstance(value, dict):
        return {k: changed.get(k, v) for k, v in value.items() if k not in dropped}
    return [changed.get(i, v) for i, v in enumerate(value) if i not in dropped]
