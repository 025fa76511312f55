"""The web UI's Starlette app, served by ``herder serve`` under ``/ui`` beside the API it calls.

``build`` is the ``herder.api.serve.UiFactory``: it gets the API's app and policy, and the CA of herder's
serving certificate for the kubeconfigs it hands out. Pages are rendered on
the server with Jinja2 from what the API answers the signed-in user (``herder.web.caller``); forms post
back with a CSRF token (``herder.web.csrf``) and redirect to the page they came from; pages follow
changes through server-sent events (``herder.web.live``). An API refusal becomes a page saying why, with
the API's status code: a client mistake is never a 500.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from herder.api.policy import HerderPolicy
from herder.web import auth, live, sso
from herder.web.pages import audit, cluster, clusters, control_planes, machine_classes, machines, providers
from herder.web.site import Web


def build(api: ASGIApp, policy: HerderPolicy, *, ca_pem: bytes | None) -> Starlette:
    """The UI over the API app ``api`` and its ``policy``."""
    web = Web(api, policy, ca_pem)
    routes: list[BaseRoute] = [
        Mount("/static", app=StaticFiles(packages=[("herder.web", "static")]), name="static"),
        Route("/", lambda request: RedirectResponse(f"{request.scope.get('root_path', '')}/clusters", 303)),
    ]
    for module in (
        auth,
        sso,
        live,
        clusters,
        cluster,
        machines,
        providers,
        machine_classes,
        audit,
        control_planes,
    ):
        routes.extend(module.routes(web))
    app = Starlette(routes=routes)

    async def not_found(request: Request, exc: Exception) -> Response:
        return web.failure(request, 404, f"{request.url.path}: no such page")

    app.add_exception_handler(404, not_found)
    return app
