"""The async Python client of herder's API."""

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
