"""``meta.k8s.io/v1`` Table output: what ``kubectl get`` prints, one row per object.

Columns are Name, the kind's printer columns, then Age. As in Kubernetes, ``date`` cells are
rendered server-side as a human duration ("5m", "3d4h"), and each row carries the object's metadata
(``includeObject=Metadata``, the default), the whole object (``Object``) or nothing (``None``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

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


def _cell(column: PrinterColumn, obj: dict[str, Any], now: datetime) -> Any:
    value = column.value(obj)
    if value is None:
        return None
    if column.type == "date":
        try:
            then = datetime.strptime(str(value), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        except ValueError:
            return "<invalid>"
        return human_duration((now - then).total_seconds())
    if column.type in ("integer", "number", "boolean"):
        return value
    return value if isinstance(value, str) else str(value)


def _row(info: KindInfo, obj: dict[str, Any], include: str, now: datetime) -> dict[str, Any]:
    row: dict[str, Any] = {"cells": [_cell(c, obj, now) for c in _columns(info)]}
    if include == "Object":
        row["object"] = obj
    elif include == "Metadata":
        row["object"] = {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj.get("metadata", {}),
        }
    return row


def table(
    info: KindInfo,
    objects: list[dict[str, Any]],
    *,
    resource_version: str = "",
    continue_token: str | None = None,
    include_object: str = "Metadata",
    headers: bool = True,
) -> dict[str, Any]:
    """A Table of ``objects`` (wire-form dicts); ``headers=False`` leaves out the column definitions."""
    now = datetime.now(UTC)
    metadata: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        metadata["continue"] = continue_token
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": column_definitions(info) if headers else [],
        "rows": [_row(info, o, include_object, now) for o in objects],
    }
