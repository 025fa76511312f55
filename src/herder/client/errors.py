"""Errors the client raises: one type per Kubernetes ``Status`` code, carrying its message."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """The server refused a request; ``message`` is its Status message, ``code`` the HTTP code."""

    def __init__(
        self, code: int, message: str, reason: str = "", details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason
        self.details = details or {}


class BadRequest(ApiError):
    pass


class Unauthorized(ApiError):
    pass


class Forbidden(ApiError):
    pass


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    """A stale resourceVersion, or (``AlreadyExists``) a name already taken."""


class AlreadyExists(Conflict):
    pass


class Gone(ApiError):
    """A watch from a revision the server no longer keeps: list again, then watch."""


class Invalid(ApiError):
    """The object failed validation; ``causes`` names each offending field."""

    @property
    def causes(self) -> list[dict[str, str]]:
        return list(self.details.get("causes", []))


class Unavailable(ApiError):
    pass


def describe(err: BaseException) -> str:
    """What an error says, for a message that wraps it: its text, or its kind when it has none (a timeout
    says nothing), so that a reason after a colon is never empty."""
    return str(err) or type(err).__name__


class TransportError(Exception):
    """The server could not be reached, or answered with something that is not the API."""


_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    503: Unavailable,
}


def from_status(code: int, body: Any) -> ApiError:
    """The exception for an answer with ``code`` whose body should be a Status."""
    status = body if isinstance(body, dict) and body.get("kind") == "Status" else {}
    message = str(status.get("message") or f"the server answered {code}")
    reason = str(status.get("reason") or "")
    details = status.get("details") if isinstance(status.get("details"), dict) else None
    cls = AlreadyExists if reason == "AlreadyExists" else _BY_CODE.get(code, ApiError)
    return cls(code, message, reason, details)
