"""For Support: the managed control plane view, the control plane health of every cluster (etcd members
and quorum, API servers and other components, the load balancer), hidden ones included.

Only Support sees it, as only Support sees hidden objects; it lists ControlPlaneStatus, whatever makes a
cluster's control plane (registered machines, a class, or a managed one), so it shows managed control
planes as they come."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from herder.api.roles import sees_hidden
from herder.web.caller import Caller
from herder.web.pages import revision
from herder.web.site import Web


def routes(web: Web) -> list[BaseRoute]:
    async def control_planes(request: Request, caller: Caller) -> Response:
        if not sees_hidden(caller.role):
            return web.failure(
                request,
                403,
                f"{caller.who.name} (role {caller.role}): the control plane view is for Support",
                caller=caller,
            )
        listed = await caller.client.list("controlplanestatuses")
        clusters = await caller.client.list("clusters")
        context = {
            "statuses": sorted(listed.items, key=lambda s: (s.namespace or "", s.name)),
            "clusters": {(c.namespace, c.name): c for c in clusters.items},
            "watch": ["controlplanestatuses", "clusters"],
            "rv": revision(listed, clusters),
        }
        return web.render(request, "control_planes.html", context, caller=caller)

    return [Route("/controlplanes", web.page(control_planes), methods=["GET"])]
