"""What a controller writes, declared: the kinds whose objects it owns, and the fields it owns of others.

A controller's ``outputs`` are the whole of what it may write (COSI's ``Outputs()``, controller-runtime's
``Owns``). ``Owns(kind)``: it makes objects of that kind through ``Context.apply_output``, which sets their
owner reference and marks them as its own, and it alone changes or deletes them. ``Writes(kind, *fields)``:
the fields it sets on objects of that kind, whoever made them, as paths — ``status.rollouts``,
``status.conditions[Ready]``, ``metadata.labels[herder.dev/cluster]``, ``metadata.finalizers[NAME]``,
``spec.talosVersion`` (a bracketed key may be an fnmatch pattern) — and whether it creates or deletes
such objects. Status is never owned with an object: every status field is declared, so "who writes
``Cluster.status.X``?" has one answer, and ``check_declarations`` refuses two controllers declaring one.

``Context`` compares every write with the object it replaces and raises ``UndeclaredOutput`` naming the
fields outside the declaration.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from herder.resources import Resource

ANY_KIND = "*"


class UndeclaredOutput(Exception):
    """A controller wrote what its declaration does not name: a defect in the controller."""


@dataclass(frozen=True)
class Output:
    """What one controller writes of one kind (``Owns`` and ``Writes`` make these)."""

    kind: str
    owned: bool = False
    """Objects of the kind that it makes (``apply_output``), changes and deletes, and nobody else may."""
    shared: bool = False
    """Its own objects of the kind are not closed to others: users with the right may change them (a
    MachineSetNode a set allocated, which a template locks), other controllers their declared fields."""
    fields: tuple[str, ...] = ()
    """The fields it sets on any object of the kind (status fields of its own outputs too)."""
    creates: bool = False
    """It creates objects of the kind that are not its own (anyone with the right may change them)."""
    deletes: bool = False
    """It deletes objects of the kind that are not its own."""
    releasable: bool = False
    """Another controller may ask it (``Context.release``) to delete one of its own objects of the kind."""

    def covers(self, path: str) -> bool:
        return any(_covers(declared, path) for declared in self.fields)


def Owns(kind: str, *status: str, shared: bool = False, releasable: bool = False) -> Output:
    """Objects of ``kind`` made, changed and deleted by this controller (and the status fields of them,
    or of any object of the kind, that it sets); ``shared``: not closed to others' changes."""
    return Output(kind, owned=True, fields=status, shared=shared, releasable=releasable)


def Writes(kind: str, *fields: str, creates: bool = False, deletes: bool = False) -> Output:
    """The ``fields`` this controller sets on objects of ``kind``, and whether it creates or deletes them."""
    return Output(kind, fields=fields, creates=creates, deletes=deletes)


def _covers(declared: str, path: str) -> bool:
    if path == declared or path.startswith((declared + ".", declared + "[")):
        return True
    # A bracketed key may be a pattern: metadata.annotations[herder.dev/*].
    head, sep, _ = declared.partition("[")
    return bool(sep) and path.startswith(head + "[") and fnmatch.fnmatchcase(path, declared)


def changed_fields(old: Resource, new: Resource) -> set[str]:
    """The declared-field paths that differ between two states of one object."""
    changed: set[str] = set()
    old_meta, new_meta = old.metadata, new.metadata
    for name in ("labels", "annotations"):
        changed |= {
            f"metadata.{name}[{k}]" for k in _changed_keys(getattr(old_meta, name), getattr(new_meta, name))
        }
    changed |= {f"metadata.finalizers[{f}]" for f in set(old_meta.finalizers) ^ set(new_meta.finalizers)}
    if old_meta.owner_references != new_meta.owner_references:
        changed.add("metadata.ownerReferences")
    changed |= _changed_map("spec", old.spec, new.spec)
    changed |= _changed_status(old.status, new.status)
    old_extra, new_extra = old.model_extra or {}, new.model_extra or {}
    changed |= set(_changed_keys(old_extra, new_extra))
    return changed


def _changed_keys(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    return [k for k in old.keys() | new.keys() if old.get(k) != new.get(k)]


def _empty(value: Any) -> bool:
    return value is None or value in ("", 0, [], {})


def _changed_map(prefix: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> set[str]:
    """The paths of the leaves that differ (a nested map is compared field by field, a list whole);
    an absent field and its zero value are the same (a part that appears with its defaults changes
    only the fields it sets)."""
    if old == new:
        return set()
    old, new = old or {}, new or {}
    changed: set[str] = set()
    for k in _changed_keys(old, new):
        before, after = old.get(k), new.get(k)
        if _empty(before) and _empty(after):
            continue
        if isinstance(before, dict | None) and isinstance(after, dict | None):
            changed |= _changed_map(f"{prefix}.{k}", before, after)
        else:
            changed.add(f"{prefix}.{k}")
    return changed


def _changed_status(old: dict[str, Any] | None, new: dict[str, Any] | None) -> set[str]:
    old, new = old or {}, new or {}
    without = "conditions"
    changed = _changed_map(
        "status",
        {k: v for k, v in old.items() if k != without},
        {k: v for k, v in new.items() if k != without},
    )
    if old.get("conditions") != new.get("conditions"):
        before = {c.get("type"): c for c in old.get("conditions") or ()}
        after = {c.get("type"): c for c in new.get("conditions") or ()}
        changed |= {f"status.conditions[{t}]" for t in _changed_keys(before, after)}
    return changed


@dataclass
class Declaration:
    """One controller's outputs, indexed for the checks of its writes."""

    name: str
    outputs: Sequence[Output]
    claimed: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """By kind, the fields other controllers declare: not this one's to change, even on its own objects."""
    _by_kind: dict[str, list[Output]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        for output in self.outputs:
            self._by_kind.setdefault(output.kind, []).append(output)

    def of(self, kind: str) -> list[Output]:
        return self._by_kind.get(kind, []) + self._by_kind.get(ANY_KIND, [])

    def owns(self, kind: str) -> bool:
        return any(o.owned for o in self.of(kind))

    def shares(self, kind: str) -> bool:
        return any(o.owned and o.shared for o in self.of(kind))

    def releasable(self, kind: str) -> bool:
        return any(o.owned and o.releasable for o in self.of(kind))

    def check_create(self, obj: Resource, *, owned: bool) -> None:
        outputs = self.of(obj.kind)
        if not any(o.owned if owned else o.creates for o in outputs):
            how = "owns" if owned else "creates"
            self._refuse(f"creates {obj.kind} {obj.name!r}, which it does not declare it {how}")

    def check_delete(self, obj: Resource, *, own: bool, theirs: bool) -> None:
        """Refuse deleting what is neither its own nor of a kind it declares it deletes, and (but for the
        garbage collector's any-kind declaration) another controller's own output: ``release`` that."""
        if own and self.owns(obj.kind):
            return
        deletes = [o for o in self.of(obj.kind) if o.deletes]
        if not deletes:
            self._refuse(f"deletes {obj.kind} {obj.name!r}, which it neither owns nor declares it deletes")
        if theirs and all(o.kind != ANY_KIND for o in deletes):
            self._refuse(f"deletes {obj.kind} {obj.name!r}, another controller's output (release it instead)")

    def check_update(self, old: Resource, new: Resource, *, own: bool) -> None:
        """Refuse a change of fields outside the declaration: an object of its own may change but for
        its status, any other only in the declared fields."""
        outputs = self.of(old.kind)
        body_free = own and any(o.owned for o in outputs)
        claimed = self.claimed.get(old.kind, ())

        def allowed(path: str) -> bool:
            if any(o.covers(path) for o in outputs):
                return True
            return body_free and not path.startswith("status") and not any(_covers(c, path) for c in claimed)

        stray = sorted(path for path in changed_fields(old, new) if not allowed(path))
        if stray:
            self._refuse(f"changes {', '.join(stray)} of {old.kind} {old.name!r}, which it does not declare")

    def _refuse(self, what: str) -> None:
        raise UndeclaredOutput(f"controller {self.name} {what}")


def declarations_of(named: Iterable[tuple[str, Sequence[Output]]]) -> dict[str, Declaration]:
    """Each controller's declaration, knowing the fields the others claim; refused (``ValueError``) when
    two declare the same field."""
    pairs = list(named)
    plain = [Declaration(name, outputs) for name, outputs in pairs]
    check_declarations(plain)
    result: dict[str, Declaration] = {}
    for name, outputs in pairs:
        claimed: dict[str, list[str]] = {}
        for other in plain:
            if other.name != name:
                for output in other.outputs:
                    claimed.setdefault(output.kind, []).extend(output.fields)
        result[name] = Declaration(name, outputs, claimed)
    return result


def check_declarations(declarations: Iterable[Declaration]) -> None:
    """Refuse two controllers declaring the same status field of one kind (or one a part of the other's):
    each has one writer. (Metadata may have several: a flag such as an annotation asking for something is
    set by whoever asks and cleared by the one who does it.)"""
    seen: dict[tuple[str, str], str] = {}
    clashes: list[str] = []
    for declaration in declarations:
        for output in declaration.outputs:
            for path in output.fields:
                if not path.startswith("status"):
                    continue
                for (kind, other_path), other in seen.items():
                    if (
                        kind == output.kind
                        and other != declaration.name
                        and (_covers(path, other_path) or _covers(other_path, path))
                    ):
                        clashes.append(f"{kind} {path} ({declaration.name}) and {other_path} ({other})")
                seen[(output.kind, path)] = declaration.name
    if clashes:
        raise ValueError("fields declared by two controllers: " + "; ".join(clashes))
