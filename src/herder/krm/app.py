"""``build_app``: a Kubernetes-style API server for any kind registry and store, as a Starlette app.

It serves ``/version``, discovery, the resource paths of every registered kind and the OpenAPI
documents. Nothing in it is specific to herder's kinds: the emulator serves core kinds with it too,
possibly mounted under a path prefix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from herder.krm import discovery, media, openapi
from herder.krm.handlers import ResourceAPI
from herder.krm.policy import AccessPolicy, AllowAll
from herder.krm.status import ApiError, api_error
from herder.resources import KindRegistry
from herder.state.store import Store

# The largest request body accepted, as in Kubernetes (3 MiB).
MAX_BODY_BYTES = 3 * 1024 * 1024
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


def build_app(
    registry: KindRegistry,
    store: Store,
    policy: AccessPolicy = AllowAll(),
    *,
    version_info: dict[str, str] | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> Starlette:
    """The API of ``registry``'s kinds over ``store``; ``policy`` (default: ``AllowAll``) decides access.

    ``version_info`` is the ``/version`` answer (default ``discovery.version_info()``). The store must
    be started on the event loop that serves the app.
    """
    resources = ResourceAPI(registry, store, policy, max_body_bytes=max_body_bytes)
    version = version_info or discovery.version_info()
    documents = openapi.Documents(registry)

    async def authenticated(request: Request, document: Callable[[], bytes | None]) -> Response:
        """``document`` for callers who authenticate; 404 when there is none."""
        try:
            await policy.authenticate(request)
        except Exception as exc:
            return api_error(exc).response()
        body = document()
        if body is None:
            return ApiError(404, "the server could not find the requested resource").response()
        return Response(body, media_type=media.JSON)

    def encoded(document: dict[str, Any] | None) -> bytes | None:
        return None if document is None else media.dumps(document)

    async def get_version(request: Request) -> Response:
        return Response(media.dumps(version), media_type=media.JSON)

    async def get_api(request: Request) -> Response:
        return await authenticated(request, lambda: encoded(discovery.api_versions(registry)))

    async def get_apis(request: Request) -> Response:
        return await authenticated(request, lambda: encoded(discovery.api_group_list(registry)))

    async def get_group(request: Request) -> Response:
        group = request.path_params["group"]
        return await authenticated(request, lambda: encoded(discovery.api_group(registry, group)))

    async def get_resources(request: Request) -> Response:
        group, version = request.path_params.get("group", ""), request.path_params["version"]
        return await authenticated(
            request, lambda: encoded(discovery.api_resource_list(registry, group, version))
        )

    async def get_openapi_v2(request: Request) -> Response:
        if not openapi.accepts_json(request.headers.get("accept")):
            return ApiError(406, "the OpenAPI v2 document is served as application/json only").response()
        return await authenticated(request, documents.v2)

    async def get_openapi_v3(request: Request) -> Response:
        root_path = request.scope.get("root_path", "")
        return await authenticated(request, lambda: documents.v3_index(root_path))

    async def get_openapi_v3_group(request: Request) -> Response:
        path = request.path_params["path"]
        return await authenticated(request, lambda: documents.v3(path))

    # Resource paths first: they are nearly every request, and routes are tried in order.
    routes = [
        Route("/apis/{group}/{version}/{path:path}", resources.handle, methods=METHODS),
        Route("/api/{version}/{path:path}", resources.handle, methods=METHODS),
        Route("/version", get_version),
        Route("/api", get_api),
        Route("/apis", get_apis),
        Route("/api/{version}", get_resources),
        Route("/apis/{group}", get_group),
        Route("/apis/{group}/{version}", get_resources),
        Route("/openapi/v2", get_openapi_v2),
        Route("/openapi/v3", get_openapi_v3),
        Route("/openapi/v3/{path:path}", get_openapi_v3_group),
    ]

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return ApiError(exc.status_code, exc.detail, headers=dict(exc.headers or {})).response()

    async def server_error(request: Request, exc: Exception) -> Response:
        return api_error(exc).response()

    return Starlette(routes=routes, exception_handlers={HTTPException: http_error, Exception: server_error})
