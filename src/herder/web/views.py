"""What the templates show of objects: conditions, ages, hardware, progress; and the checks of form
input that the API cannot make (a number typed as text), which name the field they refuse."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from herder.resources import Resource


class BadInput(ValueError):
    """A form value that is not what its field takes; the message names the field."""


def condition(obj: Resource | dict[str, Any] | None, kind: str = "Ready") -> dict[str, str]:
    """The condition ``kind`` of an object (or of its status), as status, reason and message; a
    condition not reported yet is ``Unknown``."""
    status = obj.status if isinstance(obj, Resource) else obj
    for entry in (status or {}).get("conditions") or []:
        if entry.get("type") == kind:
            return {
                "status": str(entry.get("status", "Unknown")),
                "reason": str(entry.get("reason", "")),
                "message": str(entry.get("message", "")),
            }
    return {"status": "Unknown", "reason": "", "message": ""}


def age(stamp: str | None) -> str:
    """How long ago an RFC 3339 time was, as kubectl says it (``5s``, ``3m``, ``2h``, ``4d``)."""
    if not stamp:
        return ""
    try:
        then = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp
    seconds = max(0, int((datetime.now(UTC) - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def hardware(status: dict[str, Any] | None) -> str:
    facts = (status or {}).get("hardware") or {}
    if not facts:
        return ""
    disks = facts.get("disks") or []
    size = sum(int(d.get("size") or 0) for d in disks) / 1e9
    parts = [f"{facts.get('cpus', 0)} CPU", f"{int(facts.get('memoryMiB') or 0) // 1024} GiB"]
    if disks:
        parts.append(f"{len(disks)} disk{'s' if len(disks) != 1 else ''}, {size:.0f} GB")
    return ", ".join(parts)


def percent(done: int | None, total: int | None) -> int:
    return 0 if not total else min(100, round(100 * (done or 0) / total))


def integer(value: str, field: str, *, minimum: int = 0, maximum: int = 10_000) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise BadInput(f"{field}: {value!r} is not a whole number") from None
    if not minimum <= number <= maximum:
        raise BadInput(f"{field}: must be from {minimum} to {maximum}, not {number}")
    return number


def one(form: dict[str, list[str]], field: str, *, required: bool = True) -> str:
    """The single value of a form field; a required one that is missing or empty is refused by name."""
    value = (form.get(field) or [""])[0].strip()
    if required and not value:
        raise BadInput(f"{field}: is required")
    return value


GLOBALS = {"condition": condition, "percent": percent, "hardware": hardware}
FILTERS = {"age": age}
