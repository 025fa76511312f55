"""The Machine classes page, and the form that creates one: a label selector over registered machines,
or auto-provisioning through an infra provider with fields generated from the provider's schema."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from herder.client.errors import NotFound
from herder.web import schema_form
from herder.web.caller import Caller
from herder.web.csrf import Form
from herder.web.pages import revision
from herder.web.pages.clusters import NAMESPACE, new_object
from herder.web.site import Web
from herder.web.views import BadInput, one


def labels(text: str) -> dict[str, str]:
    """``key=value, key=value`` as labels; a pair without ``=`` is refused naming the field."""
    out = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"matchLabels: {pair!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


def routes(web: Web) -> list[BaseRoute]:
    async def classes(request: Request, caller: Caller) -> Response:
        listed = await caller.client.list("machineclasses", NAMESPACE)
        context = {
            "classes": sorted(listed.items, key=lambda c: c.name),
            "watch": ["machineclasses"],
            "rv": revision(listed),
        }
        return web.render(request, "machine_classes.html", context, caller=caller)

    async def new(request: Request, caller: Caller) -> Response:
        if refused := web.refusal(request, caller, "create", "MachineClass"):
            return refused
        providers = await caller.client.list("infraproviders")
        chosen = request.query_params.get("provider", "")
        provider = next((p for p in providers.items if p.name == chosen), None)
        if chosen and provider is None:
            raise NotFound(404, f"infra provider {chosen!r} not found")
        context = {
            "providers": sorted(p.name for p in providers.items),
            "provider": chosen,
            "fields": schema_form.fields((provider.status or {}).get("schema")) if provider else [],
        }
        return web.render(request, "machine_class_new.html", context, caller=caller)

    async def create(request: Request, caller: Caller, form: Form) -> Response:
        name = one(form, "name")
        description = one(form, "description", required=False)
        chosen = one(form, "provider", required=False)
        if chosen:
            provider = await caller.client.get("infraproviders", chosen)
            data = schema_form.values((provider.status or {}).get("schema"), form)
            spec: dict[str, object] = {"autoProvision": {"providerID": chosen, "providerData": data}}
        else:
            spec = {"selector": {"matchLabels": labels(one(form, "matchLabels", required=False))}}
        if description:
            spec["description"] = description
        await caller.client.create(new_object("MachineClass", name, spec))
        return web.done(request, "/machineclasses", f"machine class {name} created")

    return [
        Route("/machineclasses", web.page(classes), methods=["GET"]),
        Route("/machineclasses/new", web.page(new), methods=["GET"]),
        Route("/machineclasses", web.form(create), methods=["POST"]),
    ]
