"""The error an emulated machine answers a call with: a gRPC status code and Talos's message."""

from __future__ import annotations

import grpc

from herder.talos.machine import roles


class ApiError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def not_authorized() -> ApiError:
    return ApiError(grpc.StatusCode.PERMISSION_DENIED, roles.NOT_AUTHORIZED)


def precondition(message: str) -> ApiError:
    return ApiError(grpc.StatusCode.FAILED_PRECONDITION, message)


def invalid(message: str) -> ApiError:
    return ApiError(grpc.StatusCode.INVALID_ARGUMENT, message)
