"""Redfish over HTTP (DSP0266), apart from any resource: errors as Redfish errors (``error`` with
``@Message.ExtendedInfo`` from the Base message registry), the headers every response carries (OData-Version,
Cache-Control, Allow, ETag, Link to the resource's schema), methods a resource does not allow (405, with
``Allow``) or nobody implements (501), ``If-Match`` on PATCH, and the ASGI plumbing."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

REGISTRY = "Base.1.16"
SCHEMAS = "http://redfish.dmtf.org/schemas/v1"
METHODS = ("GET", "HEAD", "POST", "PATCH", "PUT", "DELETE", "OPTIONS")
ASGI = Any  # ASGI callables, as uvicorn types them loosely too


class RedfishError(Exception):
    def __init__(
        self, status: int, message_id: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message_id, self.message = status, message_id, message
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        severity = "Critical" if self.status >= 500 else "Warning"
        info = {
            "@odata.type": "#Message.v1_1_1.Message",
            "MessageId": f"{REGISTRY}.{self.message_id}",
            "Message": self.message,
            "Severity": severity,
            "MessageSeverity": severity,
            "Resolution": "Correct the request and resubmit it.",
        }
        return {
            "error": {
                "code": f"{REGISTRY}.{self.message_id}",
                "message": self.message,
                "@Message.ExtendedInfo": [info],
            }
        }


def not_found(path: str) -> RedfishError:
    return RedfishError(404, "ResourceNotFound", f"The requested resource at {path} was not found.")


def not_allowed(method: str, path: str, allowed: Iterable[str]) -> RedfishError:
    return RedfishError(
        405,
        "OperationNotAllowed",
        f"The HTTP method {method} is not allowed on {path}.",
        {"Allow": ", ".join(allowed)},
    )


@dataclass
class Reply:
    status: int
    body: dict[str, Any] | None = None
    headers: dict[str, str] | None = None
    document: tuple[str, bytes] | None = None
    """A body that is not JSON: (content type, bytes), the OData metadata's XML."""


@dataclass
class Resource:
    """A resource at a path: what GET answers, and the other methods it allows."""

    get: Callable[[], dict[str, Any]] | None
    patch: Callable[[dict[str, Any]], Awaitable[Reply]] | None = None
    post: Callable[[dict[str, Any]], Awaitable[Reply]] | None = None
    delete: Callable[[], Awaitable[Reply]] | None = None
    schema: str = ""
    """Its JSON schema's name (``ComputerSystem.v1_20_0``): the response's Link header."""

    @property
    def allowed(self) -> list[str]:
        methods = ["GET", "HEAD"] if self.get is not None else []
        methods += [m for m, f in (("POST", self.post), ("PATCH", self.patch), ("DELETE", self.delete)) if f]
        return methods


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    """By lowercase name."""
    body: bytes

    @property
    def query_names(self) -> list[str]:
        return [p.partition("=")[0] for p in self.query.split("&") if p]

    def json(self) -> dict[str, Any]:
        if not self.body.strip():
            return {}
        try:
            body = json.loads(self.body)
        except ValueError:
            raise RedfishError(
                400, "MalformedJSON", "The request body submitted was malformed JSON and could not be parsed."
            ) from None
        if not isinstance(body, dict):
            raise RedfishError(400, "MalformedJSON", "The request body must be a JSON object.")
        return body


def etag(body: dict[str, Any]) -> str:
    return 'W/"' + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16] + '"'


async def call(resource: Resource, request: Request) -> Reply:
    """What the resource answers the request (its method allowed, PATCH's If-Match checked)."""
    method, allowed = request.method, resource.allowed
    if method == "OPTIONS":
        return Reply(200, None, {"Allow": ", ".join(allowed)})
    if method not in allowed:
        raise not_allowed(method, request.path, allowed)
    if method in ("GET", "HEAD"):
        assert resource.get is not None
        return Reply(200, resource.get())
    if method == "PATCH":
        assert resource.patch is not None and resource.get is not None
        wanted = request.headers.get("if-match")
        if wanted and wanted != "*" and etag(resource.get()) not in [t.strip() for t in wanted.split(",")]:
            raise RedfishError(
                412, "PreconditionFailed", "The ETag supplied did not match the ETag of the resource."
            )
        return await resource.patch(request.json())
    if method == "POST":
        assert resource.post is not None
        return await resource.post(request.json())
    assert resource.delete is not None
    return await resource.delete()


Respond = Callable[[Request], Awaitable[tuple[Reply, Resource | None]]]


async def serve(respond: Respond, scope: dict[str, Any], receive: ASGI, send: ASGI) -> None:
    """One ASGI HTTP request: read it, ``respond`` to it (a ``RedfishError`` is the error's reply)."""
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    request = Request(
        method=str(scope["method"]).upper(),
        path=scope["path"].rstrip("/") or "/",
        query=scope.get("query_string", b"").decode("latin-1"),
        headers={k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or ()},
        body=body,
    )
    try:
        if request.method not in METHODS:
            raise RedfishError(
                501,
                "OperationNotAllowed",
                f"The HTTP method {request.method} is not implemented by this service.",
            )
        if request.headers.get("odata-version", "4.0") != "4.0":
            raise RedfishError(412, "PreconditionFailed", "The service supports OData-Version 4.0 only.")
        reply, resource = await respond(request)
    except RedfishError as exc:
        reply, resource = Reply(exc.status, exc.body(), exc.headers), None
    await _send(send, request.method, reply, resource)


async def _send(send: ASGI, method: str, reply: Reply, resource: Resource | None) -> None:
    headers = {"OData-Version": "4.0", "Cache-Control": "no-cache", **(reply.headers or {})}
    if reply.document is not None:
        headers["Content-Type"], payload = reply.document
    elif reply.body is None:
        payload = b""
    else:
        payload = json.dumps(reply.body, separators=(",", ":")).encode()
        headers["Content-Type"] = "application/json;charset=utf-8"
    if resource is not None and resource.get is not None:
        headers.setdefault("Allow", ", ".join(resource.allowed))
        if reply.status == 200 and reply.body is not None and method in ("GET", "HEAD"):
            headers["ETag"] = etag(reply.body)
    if resource is not None and resource.schema:
        headers["Link"] = f"<{SCHEMAS}/{resource.schema}.json>; rel=describedby"
    headers["Content-Length"] = str(len(payload))
    await send(
        {
            "type": "http.response.start",
            "status": reply.status,
            "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()],
        }
    )
    await send({"type": "http.response.body", "body": b"" if method == "HEAD" else payload})
