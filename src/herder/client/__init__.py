"""The Python clients of herder's API: ``Client``, async, with typed objects (httpx), and ``rest.Rest``, a
light synchronous one for the commands that must answer at once.

The names below load their module when first used (PEP 562), so that importing a light part of the
package (``errors``, ``kubeconfig``, ``rest``) does not load the async client with httpx and the kinds'
models.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from herder.client.client import Client, IssuedToken, ObjectList, WatchEvent
    from herder.client.errors import (
        AlreadyExists,
        ApiError,
        BadRequest,
        Conflict,
        Forbidden,
        Gone,
        Invalid,
        NotFound,
        TransportError,
        Unauthorized,
        Unavailable,
        describe,
    )
    from herder.client.kubeconfig import Credentials, KubeconfigError

__all__ = [
    "AlreadyExists",
    "ApiError",
    "BadRequest",
    "Client",
    "Conflict",
    "Credentials",
    "Forbidden",
    "Gone",
    "Invalid",
    "IssuedToken",
    "KubeconfigError",
    "NotFound",
    "ObjectList",
    "TransportError",
    "Unauthorized",
    "Unavailable",
    "WatchEvent",
    "describe",
]
_MODULE = {
    **dict.fromkeys(("Client", "IssuedToken", "ObjectList", "WatchEvent"), "client"),
    **dict.fromkeys(("Credentials", "KubeconfigError"), "kubeconfig"),
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"herder.client.{_MODULE.get(name, 'errors')}"), name)
    globals()[name] = value
    return value
