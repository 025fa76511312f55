"""Errors as Kubernetes ``Status`` objects: the one shape every failed request is answered with.

``ApiError`` is what handlers (and access policies) raise; ``api_error`` maps the errors of the
storage and resource layers onto it, so that bad input is a 4xx with the reason Kubernetes clients
expect and only a real fault is a 500, which never carries internals.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import ValidationError
from starlette.responses import Response

from herder.krm.policy import Denied, Unauthenticated
from herder.resources import FieldError, InvalidObject, KindInfo, UnknownKind
from herder.state.errors import AlreadyExists, Conflict, Forbidden, Gone, Invalid, NotFound, Unavailable

log = logging.getLogger(__name__)

# The reason Kubernetes gives for each code it answers with.
REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}


class ApiError(Exception):
    """A request that fails with ``code``; ``details`` is the Status's details (name, kind, causes)."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            out["details"] = self.details
        return out

    def response(self) -> Response:
        body = json.dumps(self.status(), separators=(",", ":")).encode()
        return Response(body, self.code, headers=self.headers, media_type="application/json")


def qualified(info: KindInfo, what: str) -> str:
    """A kind or plural qualified by its group, as Kubernetes names them in messages."""
    return f"{what}.{info.group}" if info.group else what


def invalid(info: KindInfo, name: str, causes: list[FieldError]) -> ApiError:
    """422 Invalid naming every offending field, as kubectl prints it."""
    summary = ", ".join(str(c) for c in causes)
    return ApiError(
        422,
        f'{qualified(info, info.kind)} "{name}" is invalid: [{summary}]',
        details={
            "name": name,
            "group": info.group,
            "kind": info.kind,
            "causes": [{"reason": c.reason, "message": c.message, "field": c.field} for c in causes],
        },
    )


def causes_of(err: ValidationError, prefix: str = "") -> list[FieldError]:
    """The fields a pydantic validation error names, as ``FieldError`` causes."""
    out = []
    for e in err.errors():
        path = ".".join(str(p) for p in e["loc"])
        unknown = e["type"] == "extra_forbidden"
        reason = (
            "FieldValueNotSupported"
            if unknown
            else {"missing": "FieldValueRequired"}.get(e["type"], "FieldValueInvalid")
        )
        out.append(
            FieldError(f"{prefix}{path}" or "<body>", "unknown field" if unknown else e["msg"], reason)
        )
    return out


def api_error(exc: BaseException, info: KindInfo | None = None, name: str = "") -> ApiError:
    """The Status answer for ``exc``, raised while serving ``name`` of kind ``info``."""
    if isinstance(exc, ApiError):
        return exc
    details: dict[str, Any] = {"name": name, "group": info.group, "kind": info.plural} if info else {}
    match exc:
        case NotFound() | AlreadyExists():
            # The store names the plural; Kubernetes qualifies it with the group.
            what = qualified(info, exc.kind) if info and exc.kind == info.plural else exc.kind
            found = isinstance(exc, NotFound)
            return ApiError(
                404 if found else 409,
                f'{what} "{exc.name}" {"not found" if found else "already exists"}',
                reason="NotFound" if found else "AlreadyExists",
                details={"name": exc.name, "group": info.group if info else "", "kind": exc.kind},
            )
        case UnknownKind():
            return ApiError(404, f"the server could not find the requested resource ({exc.what})")
        case Conflict():
            return ApiError(409, str(exc), details=details or None)
        case Gone():
            return ApiError(410, str(exc))
        case Forbidden() | Denied():
            return ApiError(403, str(exc), details=details or None)
        case Unauthenticated():
            return ApiError(401, str(exc) or "Unauthorized")
        case InvalidObject():
            if info is None:
                return ApiError(422, str(exc), details={"name": exc.name, "kind": exc.kind})
            return invalid(info, exc.name or name, exc.causes)
        case ValidationError():
            return invalid(info, name, causes_of(exc)) if info else ApiError(400, str(exc))
        case Invalid():
            return ApiError(400, str(exc))
        case Unavailable():
            return ApiError(503, str(exc), headers={"Retry-After": "1"})
    log.exception("unexpected error serving a request", exc_info=exc)
    return ApiError(500, "an internal error occurred; the server log has the details")
