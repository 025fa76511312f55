"""The Infra providers page: each provider's health, version, last heartbeat and published schema, and
the machine requests with their stage, step, last error and attempts."""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from herder.web.caller import Caller
from herder.web.pages import revision
from herder.web.pages.clusters import NAMESPACE
from herder.web.site import Web


def schema_text(schema: object) -> str:
    if isinstance(schema, str):
        return schema
    return json.dumps(schema, indent=2, sort_keys=True) if schema else ""


def routes(web: Web) -> list[BaseRoute]:
    async def providers(request: Request, caller: Caller) -> Response:
        listed = await caller.client.list("infraproviders")
        requests = await caller.client.list("machinerequests", NAMESPACE)
        context = {
            "providers": sorted(listed.items, key=lambda p: p.name),
            "schemas": {p.name: schema_text((p.status or {}).get("schema")) for p in listed.items},
            "requests": sorted(requests.items, key=lambda r: r.name),
            "watch": ["infraproviders", "machinerequests"],
            "rv": revision(listed, requests),
        }
        return web.render(request, "providers.html", context, caller=caller)

    return [Route("/providers", web.page(providers), methods=["GET"])]
