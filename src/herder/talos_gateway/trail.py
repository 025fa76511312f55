"""Every call through the gateway in herder's audit trail: one AuditEvent per node a call went to (or was
refused for), on the node's Machine, its subresource ``talos``, its verb the Talos method (``Version``,
``Reboot``, ``Watch``…), its code the HTTP status of the call's gRPC status, its message the full method,
the node as the caller named it and the outcome.

A call refused before any node was looked at (a certificate whose account is gone, a method the role does
not allow) is one event without an object. Support's calls to hidden machines are recorded without the
machine's name or address in what admins read, as Support's requests through the API are.
"""

from __future__ import annotations

import grpc

from herder.api.audit import AuditLog
from herder.krm.policy import Access, Identity
from herder.resources.machines import MACHINE
from herder.talos_gateway.methods import Method
from herder.talos_gateway.targets import Target

SUBRESOURCE = "talos"

# As gRPC gateways translate statuses to HTTP (grpc-gateway's HTTPStatusFromCode).
_HTTP = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
}


def http_status(code: grpc.StatusCode) -> int:
    return _HTTP.get(code, 500)


class CallTrail:
    def __init__(self, audit: AuditLog) -> None:
        self._audit = audit

    async def record(
        self,
        who: Identity | None,
        method: Method,
        target: Target | None,
        *,
        namespace: str,
        source: str,
        user_agent: str,
        code: grpc.StatusCode,
        outcome: str,
    ) -> None:
        machine = target.machine if target is not None else None
        node = f" on node {target.node}" if target is not None else ""
        conceal: frozenset[str] = frozenset()
        if target is not None and machine is not None and target.hidden:
            conceal = frozenset({machine.name, target.node})
        await self._audit.record(
            who,
            Access(method.name, MACHINE, namespace, machine.name if machine else None, SUBRESOURCE),
            method="POST",  # gRPC calls are HTTP/2 POSTs
            source=source,
            user_agent=user_agent,
            code=http_status(code),
            message=f"{method.path}{node}: {code.name}{': ' + outcome if outcome else ''}",
            conceal=conceal,
            always=True,
        )
