"""The object model: the Kubernetes resource shape, the kind registry, and herder's kinds.

This layer imports nothing of herder and does no I/O.
"""

from herder.resources.errors import FieldError, InvalidObject, UnknownKind
from herder.resources.meta import Condition, ObjectMeta, OwnerReference, now_rfc3339
from herder.resources.object import Resource
from herder.resources.registry import KindInfo, KindRegistry, PrinterColumn

__all__ = [
    "Condition",
    "FieldError",
    "InvalidObject",
    "KindInfo",
    "KindRegistry",
    "ObjectMeta",
    "OwnerReference",
    "PrinterColumn",
    "Resource",
    "UnknownKind",
    "now_rfc3339",
]
