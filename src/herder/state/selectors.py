"""Label and field selectors in Kubernetes syntax: parsed once, then matched against objects."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from herder.resources import Resource
from herder.state.errors import Invalid

_KEY = re.compile(r"^([a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?/)?[a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?$")
_VALUE = re.compile(r"^([a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?)?$")
_SET = re.compile(r"^\s*([^\s!=()]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        match self.op:
            case "exists":
                return present
            case "!exists":
                return not present
            case "=" | "in":
                return present and labels[self.key] in self.values
            case _:  # "!=" and "notin" match objects without the key, as in Kubernetes
                return not present or labels[self.key] not in self.values


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements

    def narrowing(self) -> tuple[str, frozenset[str]] | None:
        """A label and the values it must have (from an ``=`` or ``in`` term), if the selector has one:
        only objects so labelled can match."""
        return next(((r.key, r.values) for r in self.requirements if r.op in ("=", "in")), None)

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        """Parse ``a=b,c!=d,e in (x,y),!f,g``; a bad selector raises ``Invalid`` naming the term."""
        if not text or not text.strip():
            return cls()
        return cls(tuple(_parse_term(term) for term in _split_terms(text)))

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> LabelSelector:
        return cls(tuple(Requirement(k, "=", frozenset({v})) for k, v in sorted(labels.items())))


def _split_terms(text: str) -> list[str]:
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise Invalid(f"invalid label selector {text!r}: unbalanced parentheses")
        elif ch == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    if depth:
        raise Invalid(f"invalid label selector {text!r}: unbalanced parentheses")
    terms.append(text[start:])
    return [t.strip() for t in terms]


def _check_key(key: str, term: str) -> str:
    if not _KEY.match(key) or len(key) > 317:
        raise Invalid(f"invalid label selector term {term!r}: {key!r} is not a valid label key")
    return key


def _check_values(values: list[str], term: str) -> frozenset[str]:
    for v in values:
        if not _VALUE.match(v) or len(v) > 63:
            raise Invalid(f"invalid label selector term {term!r}: {v!r} is not a valid label value")
    return frozenset(values)


def _parse_term(term: str) -> Requirement:
    if not term:
        raise Invalid("invalid label selector: empty term")
    if m := _SET.match(term):
        values = [v.strip() for v in m.group(3).split(",") if v.strip()]
        if not values:
            raise Invalid(f"invalid label selector term {term!r}: the set of values is empty")
        return Requirement(_check_key(m.group(1), term), m.group(2), _check_values(values, term))
    for op, name in (("!=", "!="), ("==", "="), ("=", "=")):
        if op in term:
            key, _, value = term.partition(op)
            return Requirement(_check_key(key.strip(), term), name, _check_values([value.strip()], term))
    if term.startswith("!"):
        return Requirement(_check_key(term[1:].strip(), term), "!exists")
    return Requirement(_check_key(term, term), "exists")


FIELD_PATHS = ("metadata.name", "metadata.namespace")


@dataclass(frozen=True)
class FieldSelector:
    """A field selector (``=``, ``==``, ``!=``) on ``metadata.name``, ``metadata.namespace`` and the fields
    a kind allows besides (a pod's ``spec.nodeName``); values compare as their text, a missing field as ""."""

    terms: tuple[tuple[str, bool, str], ...] = ()  # (field, equal, value)

    def matches(self, obj: Resource) -> bool:
        data: dict[str, Any] | None = None
        for field, equal, value in self.terms:
            if field == "metadata.name":
                actual = obj.name
            elif field == "metadata.namespace":
                actual = obj.namespace or ""
            else:
                data = data if data is not None else obj.to_dict()
                actual = _text(_at(data, field))
            if (actual == value) != equal:
                return False
        return True

    def equal(self, field: str) -> str | None:
        """The value a term requires this field to equal, if any (used to narrow a scan)."""
        return next((v for f, eq, v in self.terms if f == field and eq), None)

    @classmethod
    def parse(cls, text: str | None, fields: Iterable[str] = ()) -> FieldSelector:
        """Parse ``text``; ``fields`` are the paths the kind allows besides the metadata ones."""
        if not text or not text.strip():
            return cls()
        allowed = (*FIELD_PATHS, *fields)
        terms = []
        for raw in text.split(","):
            term = raw.strip()
            for op, eq in (("!=", False), ("==", True), ("=", True)):
                if op in term:
                    field, _, value = term.partition(op)
                    field = field.strip()
                    if field not in allowed:
                        raise Invalid(
                            f'field label not supported: "{field}" (supported: {", ".join(allowed)})'
                        )
                    terms.append((field, eq, value.strip()))
                    break
            else:
                raise Invalid(f"invalid field selector term {term!r}: expected FIELD=VALUE or FIELD!=VALUE")
        return cls(tuple(terms))


def _at(data: Any, path: str) -> Any:
    for part in path.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
