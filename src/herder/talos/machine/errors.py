"""Errors of the Talos machine API, one class per gRPC status a caller may want to tell apart."""

from __future__ import annotations

import grpc


class MachineAPIError(Exception):
    """A call failed; ``code`` is the gRPC status name, ``node`` the machine it was aimed at."""

    code = "UNKNOWN"

    def __init__(self, message: str, *, node: str = "") -> None:
        super().__init__(f"{node}: {message}" if node else message)
        self.message = message
        self.node = node


class Unavailable(MachineAPIError):
    """The machine could not be reached (down, powered off, refusing connections)."""

    code = "UNAVAILABLE"


class DeadlineExceeded(MachineAPIError):
    """No answer in time (the machine may be partitioned or overloaded)."""

    code = "DEADLINE_EXCEEDED"


class Unauthenticated(MachineAPIError):
    """The machine refused the client's identity (no certificate, or one from another CA), or vice versa."""

    code = "UNAUTHENTICATED"


class PermissionDenied(MachineAPIError):
    """The client's role does not allow the method."""

    code = "PERMISSION_DENIED"


class InvalidArgument(MachineAPIError):
    code = "INVALID_ARGUMENT"


class FailedPrecondition(MachineAPIError):
    """The machine is not in a state that allows the call (e.g. bootstrap before it runs)."""

    code = "FAILED_PRECONDITION"


class AlreadyExists(MachineAPIError):
    code = "ALREADY_EXISTS"


class NotFound(MachineAPIError):
    code = "NOT_FOUND"


class Unimplemented(MachineAPIError):
    code = "UNIMPLEMENTED"


_BY_CODE: dict[grpc.StatusCode, type[MachineAPIError]] = {
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
}


def from_status(code: grpc.StatusCode, details: str, *, node: str = "") -> MachineAPIError:
    error = _BY_CODE.get(code, MachineAPIError)(details or code.name, node=node)
    if error.__class__ is MachineAPIError:
        error.code = code.name
    return error
