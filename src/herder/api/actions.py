"""Object actions: requests that do something with one object rather than change it, such as downloading
a cluster's kubeconfig.

``POST /apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}/{action}`` (or without the
namespace part for cluster-scoped kinds) with a JSON body of options. The policy table says which role
may run each action (``Rule.actions``); a hidden object answers 404 as if it did not exist; every call is
audited as a ``create`` of the action's subresource. What an action does is given in by the composition
root (the API layer knows no Talos): a handler gets the object, the caller's name and role, and the
options, and answers the bytes to send back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from herder.api.policy import HerderPolicy
from herder.krm import media
from herder.krm.policy import Access, Identity
from herder.krm.status import ApiError, api_error
from herder.resources import KindInfo, KindRegistry
from herder.state.errors import NotFound
from herder.state.store import Store

MAX_OPTIONS_BYTES = 64 * 1024

# (the object, the caller's name, the caller's role, the options) → the answer's body
ActionHandler = Callable[[Any, str, str, dict[str, Any]], Awaitable[bytes]]


class ActionFailed(Exception):
    """An action that cannot be done now or with these options; ``code`` is the HTTP status to answer."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class ObjectAction:
    kind: str
    name: str
    handler: ActionHandler
    media_type: str = "application/yaml"


def action_routes(
    registry: KindRegistry, store: Store, policy: HerderPolicy, actions: Sequence[ObjectAction]
) -> list[Route]:
    """One route per action, so that no other path of the API is shadowed."""
    routes = []
    for action in actions:
        info = registry.get(action.kind)
        base = f"/apis/{info.group}/{info.version}" if info.group else f"/api/{info.version}"
        scope = "/namespaces/{namespace}" if info.namespaced else ""
        path = f"{base}{scope}/{info.plural}/{{name}}/{action.name}"
        routes.append(Route(path, _endpoint(info, store, policy, action), methods=["POST"]))
    return routes


def _endpoint(
    info: KindInfo, store: Store, policy: HerderPolicy, action: ObjectAction
) -> Callable[[Request], Awaitable[Response]]:
    async def run(request: Request) -> Response:
        name = request.path_params["name"]
        namespace = request.path_params.get("namespace")
        access = Access("create", info, namespace, name, action.name)
        who: Identity | None = None
        try:
            who = await policy.authenticate(request)
            policy.authorize(who, access)
            raw = await media.read_body(request, MAX_OPTIONS_BYTES)
            options = media.parse_object(raw, media.JSON) if raw.strip() else {}
            obj = await store.get(info, name, namespace)
            if not policy.visible(who, info, obj.name, obj.metadata.labels):
                raise NotFound(info.plural, name)
            policy.authorize(who, access, obj)
            role = policy.role_on(who, info, obj.name, obj.metadata.labels)
            try:
                body = await action.handler(obj, who.name, role, options)
            except ActionFailed as exc:
                raise ApiError(exc.code, str(exc)) from None
        except Exception as exc:
            error = api_error(exc, info, name)
            await policy.record(who, access, request, error.code, error.message)
            return error.response()
        await policy.record(who, access, request, 201, f"{action.name} of {info.kind} {name}")
        return Response(body, 201, media_type=action.media_type, headers={"Cache-Control": "no-store"})

    return run
