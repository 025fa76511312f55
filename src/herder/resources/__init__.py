"""The object model: the Kubernetes resource shape, the kind registry, and herder's kinds.

This layer imports nothing of herder and does no I/O. The names below load their module when first used
(PEP 562), so that importing a light module of the package (``audit_labels``) does not build the models.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from herder.resources.errors import FieldError, InvalidObject, UnknownKind
    from herder.resources.meta import (
        LIST_SET,
        Condition,
        ManagedFieldsEntry,
        ObjectMeta,
        OwnerReference,
        list_map,
        now_micro,
        now_rfc3339,
    )
    from herder.resources.object import Resource
    from herder.resources.registry import KindInfo, KindRegistry, PrinterColumn

__all__ = [
    "LIST_SET",
    "Condition",
    "FieldError",
    "InvalidObject",
    "KindInfo",
    "KindRegistry",
    "ManagedFieldsEntry",
    "ObjectMeta",
    "OwnerReference",
    "PrinterColumn",
    "Resource",
    "UnknownKind",
    "list_map",
    "now_micro",
    "now_rfc3339",
]
_MODULE = {
    **dict.fromkeys(("FieldError", "InvalidObject", "UnknownKind"), "errors"),
    **dict.fromkeys(("Resource",), "object"),
    **dict.fromkeys(("KindInfo", "KindRegistry", "PrinterColumn"), "registry"),
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"herder.resources.{_MODULE.get(name, 'meta')}"), name)
    globals()[name] = value
    return value
