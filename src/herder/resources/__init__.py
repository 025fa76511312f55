"""The object model: the Kubernetes resource shape, the kind registry, and herder's kinds.

This layer imports nothing of herder and does no I/O.
"""

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
