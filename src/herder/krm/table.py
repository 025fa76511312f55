"""``meta.k8s.io/v1`` Table output: what ``kubectl get`` prints, one row per object.

Columns are Name, the kind's printer columns, then Age. As in Kubernetes, ``date`` cells are
rendered server-side as a human duration ("5m", "3d4h"), and each row carries the object's metadata
(``includeObject=Metadata``, the default), the whole object (``Object``) or nothing (``None``).
A ``Row`` is made once per object revision; only its ages are rendered per answer.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from herder.krm.media import dumps
from herder.resources import KindInfo, PrinterColumn

INCLUDE_OBJECT = ("None", "Metadata", "Object")

_NAME = PrinterColumn("Name", ".metadata.name", description="The name of the object.")
_AGE = PrinterColumn("Age", ".metadata.creationTimestamp", type="date", description="Time since creation.")


def _columns(info: KindInfo) -> tuple[PrinterColumn, ...]:
    # A kind may place Age itself: kubectl prints a node's VERSION and a pod's IP after it.
    if any(c.name == _AGE.name for c in info.printer_columns):
        return (_NAME, *info.printer_columns)
    return (_NAME, *info.printer_columns, _AGE)


def column_definitions(info: KindInfo) -> list[dict[str, Any]]:
    return [
        {
            "name": c.name,
            "type": c.type,
            "format": "name" if c is _NAME else "",
            "description": c.description or c.name,
            "priority": c.priority,
        }
        for c in _columns(info)
    ]


def human_duration(seconds: float) -> str:
    """Kubernetes' short duration format (``duration.HumanDuration``)."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 120:
        return f"{max(s, 0)}s"
    minutes, hours, days = s // 60, s // 3600, s // 86400
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years = days // 365
    if hours < 24 * 365 * 8:
        return f"{years}y{days % 365}d" if days % 365 else f"{years}y"
    return f"{years}y"


def _time(value: Any) -> float | None:
    """A date cell's time (seconds since the epoch); None when it is not an RFC 3339 time."""
    try:
        then = datetime.strptime(str(value), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    return then.timestamp()


def _cell(column: PrinterColumn, value: Any) -> Any:
    if value is None or column.type in ("integer", "number", "boolean"):
        return value
    return value if isinstance(value, str) else str(value)


class Row:
    """One object's row, made once per object revision and rendered anew for each answer.

    The row is kept as JSON cut at its date cells, which are kept as times: only their ages change
    from one answer to the next.
    """

    __slots__ = ("_parts", "_times")

    def __init__(self, info: KindInfo, obj: dict[str, Any], include: str) -> None:
        self._parts: list[bytes] = []
        self._times: list[float] = []
        text = b'{"cells":['
        for i, column in enumerate(_columns(info)):
            text += b"," if i else b""
            value = column.value(obj)
            then = _time(value) if column.type == "date" and value is not None else None
            if then is not None:
                self._parts.append(text)
                self._times.append(then)
                text = b""
            elif column.type == "date" and value is not None:
                text += b'"<invalid>"'
            else:
                text += dumps(_cell(column, value))
        text += b"]"
        if include == "Object":
            text += b',"object":' + dumps(obj)
        elif include == "Metadata":
            partial = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata", {}),
            }
            text += b',"object":' + dumps(partial)
        self._parts.append(text + b"}")

    def render(self, now: float) -> bytes:
        """The row's JSON with its ages as of ``now`` (seconds since the epoch)."""
        parts = self._parts
        if not self._times:
            return parts[0]
        out = [parts[0]]
        for then, part in zip(self._times, parts[1:], strict=True):
            out.append(b'"' + human_duration(now - then).encode() + b'"')
            out.append(part)
        return b"".join(out)


def table(
    info: KindInfo,
    rows: Iterable[Row],
    *,
    resource_version: str = "",
    continue_token: str | None = None,
    headers: bool = True,
) -> bytes:
    """A Table of ``rows`` as JSON; ``headers=False`` leaves out the column definitions."""
    now = time.time()
    metadata: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        metadata["continue"] = continue_token
    head = dumps(
        {
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": metadata,
            "columnDefinitions": column_definitions(info) if headers else [],
        }
    )
    return head[:-1] + b',"rows":[' + b",".join(row.render(now) for row in rows) + b"]}"
