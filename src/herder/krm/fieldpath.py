"""Sets of field paths in Kubernetes' ``FieldsV1`` notation: what one field manager owns of an object.

A path is a tuple of path elements, each written as ``FieldsV1`` writes it: ``f:spec`` (a field of an
object), ``k:{"type":"Ready"}`` (the item of a list merged by keys), ``v:"a"`` (the item of a set) or
``i:0`` (a list index, which only a client's own entries may hold). A ``FieldSet`` is a tree of such
elements; a node that is in the set itself is a *member*, written ``".": {}`` when it also has
children (``{"f:labels": {".": {}, "f:app": {}}}``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

Path = tuple[str, ...]

_KINDS = "fkvi"


def field(name: str) -> str:
    """The path element of an object's field (or a map's key)."""
    return "f:" + name


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def key(item: Mapping[str, Any], keys: tuple[str, ...]) -> str:
    """The path element of a list item merged by ``keys``."""
    return "k:" + _json({k: item[k] for k in keys})


def value(item: Any) -> str:
    """The path element of a set's item."""
    return "v:" + _json(item)


def _element(text: str) -> str:
    """``text`` checked as a path element and written canonically; ValueError if it is not one."""
    kind, sep, rest = text.partition(":")
    if not sep or len(kind) != 1 or kind not in _KINDS:
        raise ValueError(f"{text!r} is not a path element (f:NAME, k:{{...}}, v:VALUE or i:INDEX)")
    if kind == "f":
        return text
    if kind == "i":
        if not rest.isdigit():
            raise ValueError(f"{text!r}: a list index must be a non-negative integer")
        return f"i:{int(rest)}"
    try:
        parsed = json.loads(rest)
    except ValueError:
        raise ValueError(f"{text!r}: the part after {kind}: is not JSON") from None
    if kind == "k" and not isinstance(parsed, dict):
        raise ValueError(f"{text!r}: a list item's key must be a JSON object")
    return kind + ":" + _json(parsed)


def format_path(path: Path) -> str:
    """A path as Kubernetes prints it in conflicts: ``.spec.ports[port=80,protocol="TCP"].name``."""
    out = []
    for element in path:
        kind, rest = element[0], element[2:]
        if kind == "f":
            out.append("." + rest)
        elif kind == "k":
            fields = json.loads(rest)
            out.append("[" + ",".join(f"{k}={_json(v)}" for k, v in sorted(fields.items())) + "]")
        elif kind == "v":
            out.append("[=" + rest + "]")
        else:
            out.append(f"[{rest}]")
    return "".join(out)


def _order(element: str) -> tuple[int, str]:
    return _KINDS.index(element[0]), element


class FieldSet:
    """A set of paths, as a tree. Empty nodes are never kept, so a node exists exactly when its path
    or a path below it is in the set."""

    __slots__ = ("children", "member")

    def __init__(self) -> None:
        self.member = False
        self.children: dict[str, FieldSet] = {}

    @classmethod
    def of(cls, *paths: Path) -> FieldSet:
        out = cls()
        for path in paths:
            out.insert(path)
        return out

    def insert(self, path: Path) -> None:
        node = self
        for element in path:
            node = node.children.setdefault(element, FieldSet())
        if path:
            node.member = True

    def get(self, element: str) -> FieldSet | None:
        """The subtree under one path element, if the set has anything there."""
        return self.children.get(element)

    def __contains__(self, path: Path) -> bool:
        node: FieldSet | None = self
        for element in path:
            node = node.children.get(element) if node is not None else None
        return node is not None and node.member and bool(path)

    def empty(self) -> bool:
        return not self.children

    def __repr__(self) -> str:
        return f"FieldSet({self.to_json()})"

    def copy(self) -> FieldSet:
        return self.union(FieldSet())

    def union(self, other: FieldSet) -> FieldSet:
        out = FieldSet()
        out.member = self.member or other.member
        for element in self.children.keys() | other.children.keys():
            mine = self.children.get(element) or FieldSet()
            out.children[element] = mine.union(other.children.get(element) or FieldSet())
        return out

    def difference(self, other: FieldSet) -> FieldSet:
        out = FieldSet()
        out.member = self.member and not other.member
        for element, child in self.children.items():
            theirs = other.children.get(element)
            rest = child.copy() if theirs is None else child.difference(theirs)
            if rest.member or rest.children:
                out.children[element] = rest
        return out

    def intersection(self, other: FieldSet) -> FieldSet:
        out = FieldSet()
        out.member = self.member and other.member
        for element, child in self.children.items():
            theirs = other.children.get(element)
            if theirs is not None:
                both = child.intersection(theirs)
                if both.member or both.children:
                    out.children[element] = both
        return out

    def members(self, prefix: Path = ()) -> Iterator[Path]:
        """Every path in the set, parents before children, in ``FieldsV1``'s order."""
        for element in sorted(self.children, key=_order):
            child = self.children[element]
            path = (*prefix, element)
            if child.member:
                yield path
            yield from child.members(path)

    def leaves(self) -> Iterator[Path]:
        """The paths in the set that have nothing below them in it (where conflicts are reported)."""
        return (p for p in self.members() if not self._node(p).children)

    def _node(self, path: Path) -> FieldSet:
        node = self
        for element in path:
            node = node.children[element]
        return node

    def to_json(self) -> dict[str, Any]:
        """The set in ``FieldsV1`` notation."""
        out: dict[str, Any] = {}
        if self.member and self.children:
            out["."] = {}
        for element in sorted(self.children, key=_order):
            out[element] = self.children[element].to_json()
        return out

    @classmethod
    def from_json(cls, data: Any) -> FieldSet:
        """A set written in ``FieldsV1`` notation; ValueError naming the first thing wrong with it."""
        if not isinstance(data, dict):
            raise ValueError("a field set must be a JSON object")
        out = cls()
        for text, child in data.items():
            if text == ".":
                if child != {}:
                    raise ValueError('the "." of a field set must be {}')
                continue
            element = _element(text)
            node = cls.from_json(child)
            # A leaf ({}) is a member; a node with children is one only when it says so with ".".
            node.member = not node.children or "." in child
            out.children[element] = node
        return out
