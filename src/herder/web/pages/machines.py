"""The Machines page: all machines, the free ones, or one provider's; their stage, hardware, cluster,
power and last error; power on, off and reboot where the API allows it (a read-only machine says why
nothing can be done to it). A machine's own page adds the configs herder applied to it, newest first, each
as a diff with secrets redacted, for those who may read them (Operator on its cluster and up)."""

from __future__ import annotations

import contextlib
import secrets

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from herder.client.errors import Forbidden, NotFound
from herder.web.app import Web
from herder.web.caller import Caller
from herder.web.csrf import Form
from herder.web.pages import revision
from herder.web.pages.clusters import CLUSTER_LABEL, NAMESPACE
from herder.web.views import BadInput, one

PROVIDER_LABEL = "herder.dev/infra-provider-id"
POWER: dict[str, dict[str, object]] = {"on": {"on": True}, "off": {"on": False}}


def routes(web: Web) -> list[BaseRoute]:
    async def machines(request: Request, caller: Caller) -> Response:
        show = request.query_params.get("show", "all")
        listed = await caller.client.list("machines", NAMESPACE)
        # Power is carried out by a machine's provider: only those that say they can are offered it.
        powered = {
            p.name
            for p in (await caller.client.list("infraproviders")).items
            if ((p.status or {}).get("capabilities") or {}).get("power")
        }
        providers = sorted(
            {m.metadata.labels[PROVIDER_LABEL] for m in listed.items if PROVIDER_LABEL in m.metadata.labels}
        )
        items = listed.items
        if show == "free":
            items = [m for m in items if CLUSTER_LABEL not in m.metadata.labels]
        elif show.startswith("provider:"):
            items = [m for m in items if m.metadata.labels.get(PROVIDER_LABEL) == show.partition(":")[2]]
        rows = [
            {
                "machine": m,
                "refusal": caller.why_not("update", "Machine", m),
                "power": m.metadata.labels.get(PROVIDER_LABEL) in powered,
            }
            for m in sorted(items, key=lambda m: m.name)
        ]
        context = {
            "rows": rows,
            "show": show,
            "providers": providers,
            "watch": ["machines"],
            "rv": revision(listed),
        }
        return web.render(request, "machines.html", context, caller=caller)

    async def machine(request: Request, caller: Caller) -> Response:
        name = request.path_params["name"]
        found = await caller.client.get("machines", name, NAMESPACE)
        history = None
        with contextlib.suppress(NotFound, Forbidden):  # none yet, or not the caller's to read
            history = await caller.client.get("machineconfighistories", name, NAMESPACE)
        entries = list(reversed((history.spec or {}).get("entries") or [])) if history else []
        context = {
            "m": found,
            "history": entries,
            "may_read_history": history is not None
            or not caller.why_not("get", "MachineConfigHistory", found),
            "watch": ["machines", "machineconfighistories"],
            "rv": found.metadata.resource_version or "",
        }
        return web.render(request, "machine.html", context, caller=caller)

    async def power(request: Request, caller: Caller, form: Form) -> Response:
        name = request.path_params["name"]
        what = one(form, "power")
        change: dict[str, object]
        if what == "reboot":
            change = {"rebootRequestID": secrets.token_hex(8)}
        elif what in POWER:
            change = POWER[what]
        else:
            raise BadInput(f"power: {what!r} is not on, off or reboot")
        await caller.client.patch("machines", name, {"spec": {"power": change}}, NAMESPACE)
        return web.done(request, "/machines", f"machine {name}: {what} requested")

    return [
        Route("/machines", web.page(machines), methods=["GET"]),
        Route("/machines/{name}", web.page(machine), methods=["GET"]),
        Route("/machines/{name}/power", web.form(power), methods=["POST"]),
    ]
