"""Status conventions shared by herder's kinds: conditions kept as Kubernetes keeps them, and the
printer columns that show them.

A condition's ``lastTransitionTime`` moves only when its status flips, so a controller that writes the
same verdict again writes nothing new (the store skips unchanged objects).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from herder.resources.meta import Condition, now_rfc3339
from herder.resources.object import Resource
from herder.resources.registry import PrinterColumn

Conditions = list[dict[str, Any]]


def find_condition(conditions: Conditions | None, kind: str) -> dict[str, Any] | None:
    return next((c for c in conditions or () if c.get("type") == kind), None)


def condition_true(status: dict[str, Any] | None, kind: str) -> bool:
    found = find_condition((status or {}).get("conditions"), kind)
    return found is not None and found.get("status") == "True"


def set_condition(
    conditions: Conditions,
    kind: str,
    ok: bool | None,
    reason: str,
    message: str = "",
    *,
    observed_generation: int | None = None,
    now: str | None = None,
) -> Conditions:
    """``conditions`` with ``kind`` set to True, False or (``ok`` None) Unknown, in place and returned;
    ``now`` (default: the wall clock) is the transition time of a flip."""
    status = "Unknown" if ok is None else "True" if ok else "False"
    current = find_condition(conditions, kind)
    entry: dict[str, Any] = {"type": kind, "status": status, "reason": reason, "message": message}
    if observed_generation is not None:
        entry["observedGeneration"] = observed_generation
    if current is not None and current.get("status") == status:
        entry["lastTransitionTime"] = current.get("lastTransitionTime") or now or now_rfc3339()
        current.clear()
        current.update(entry)
    else:
        entry["lastTransitionTime"] = now or now_rfc3339()
        if current is not None:
            current.clear()
            current.update(entry)
        else:
            conditions.append(entry)
    return conditions


def _condition_cell(kind: str) -> Callable[[dict[str, Any]], Any]:
    def cell(obj: dict[str, Any]) -> Any:
        found = find_condition((obj.get("status") or {}).get("conditions"), kind)
        return found.get("status") if found else "Unknown"

    return cell


def condition_column(kind: str, name: str | None = None, priority: int = 0) -> PrinterColumn:
    """A column showing the status of one condition (``True``, ``False`` or ``Unknown``)."""
    return PrinterColumn(name or kind, ".status.conditions", priority=priority, compute=_condition_cell(kind))


def condition_reason_column(kind: str, name: str, priority: int = 1) -> PrinterColumn:
    """A column showing why a condition is as it is: its message, else its reason."""

    def cell(obj: dict[str, Any]) -> Any:
        found = find_condition((obj.get("status") or {}).get("conditions"), kind)
        return (found.get("message") or found.get("reason")) if found else ""

    return PrinterColumn(name, ".status.conditions", priority=priority, compute=cell)


M = TypeVar("M", bound=BaseModel)


def status_of(obj: Resource, model: type[M]) -> M:
    """The object's status as its typed model (an object without one gets the model's defaults)."""
    return model.model_validate(obj.status or {})


def dump_status(status: BaseModel) -> dict[str, Any]:
    """A typed status as the store keeps it (JSON names, no nulls: what ``KindInfo`` normalizes to)."""
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)


def mutate_status(obj: Resource, model: type[M], change: Callable[[M], None]) -> Resource:
    """A copy of ``obj`` whose status ``change`` edited as its typed model."""
    status = status_of(obj, model)
    change(status)
    return obj.model_copy(update={"status": dump_status(status)})


class WithConditions(BaseModel):
    """A typed status with Kubernetes conditions, and the ways controllers read and set them."""

    conditions: list[dict[str, Any]] = []

    def condition(self, kind: str) -> Condition | None:
        found = find_condition(self.conditions, kind)
        return Condition.model_validate(found) if found is not None else None

    def condition_true(self, kind: str) -> bool:
        found = find_condition(self.conditions, kind)
        return found is not None and found.get("status") == "True"

    def set_condition(
        self,
        kind: str,
        ok: bool | None,
        reason: str,
        message: str = "",
        *,
        observed_generation: int | None = None,
        now: str | None = None,
    ) -> None:
        set_condition(
            self.conditions, kind, ok, reason, message, observed_generation=observed_generation, now=now
        )


class AnyConditions(WithConditions):
    """Any kind's status read only for its conditions: its other fields are kept as they are."""

    model_config = ConfigDict(extra="allow")
