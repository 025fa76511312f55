"""The error an emulated machine answers a call with: a gRPC status code and Talos's message."""

from __future__ import annotations

import grpc


class ApiError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def not_authorized() -> ApiError:
    # Talos's authorizer answers every refused role with exactly this.
    return ApiError(grpc.StatusCode.PERMISSION_DENIED, "not authorized")


def precondition(message: str) -> ApiError:
    return ApiError(grpc.StatusCode.FAILED_PRECONDITION, message)


def invalid(message: str) -> ApiError:
    return ApiError(grpc.StatusCode.INVALID_ARGUMENT, message)
