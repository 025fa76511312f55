"""The Machines page: all machines, the free ones, or one provider's; their stage, hardware, cluster,
power and last error; power on, off and reboot where the API allows it (a read-only machine says why
nothing can be done to it). A machine's page: its facts and conditions, the configs herder applied to it
(newest first, each as a diff with secrets redacted, for Operators of its cluster and up), and a live view
of the logs herder keeps of it (its services' or its kernel's), the last lines and then each new one as it comes
(``/ui/machines/UUID/log?source=…``, server-sent events from the API's ``follow``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from herder.client.errors import ApiError, Forbidden, NotFound, TransportError
from herder.web.caller import Caller
from herder.web.csrf import Form
from herder.web.pages import revision
from herder.web.pages.clusters import CLUSTER_LABEL, NAMESPACE
from herder.web.site import SECURITY_HEADERS, Web
from herder.web.views import BadInput, one

PROVIDER_LABEL = "herder.dev/infra-provider-id"
POWER: dict[str, dict[str, object]] = {"on": {"on": True}, "off": {"on": False}}
LOG_LINES = 200
"""The last lines a machine's page shows before following."""
KERNEL_SOURCE = "dmesg"
KEEPALIVE = 15.0


def _source(request: Request) -> tuple[str | None, bool]:
    """The log a page shows (``?source=``: every service's, a service's, or ``dmesg``): service, kernel."""
    source = request.query_params.get("source", "")
    if len(source) > 64 or not all(c.isalnum() or c in "-_." for c in source):
        raise BadInput(f"source: {source[:64]!r} is not a service's name")
    return (None, True) if source == KERNEL_SOURCE else (source or None, False)


async def _log_events(caller: Caller, name: str, service: str | None, kernel: bool) -> AsyncIterator[str]:
    """The machine's new log lines as server-sent events (``line``), until the browser leaves; ``ended``
    with the reason when the API refuses or ends the stream."""
    lines: asyncio.Queue[str | None] = asyncio.Queue(maxsize=1000)
    ended = ""

    async def read() -> None:
        nonlocal ended
        try:
            async for line in caller.client.machine_log(
                name, NAMESPACE, service=service, kernel=kernel, follow=True, tail=0, timestamps=True
            ):
                await lines.put(line)
            ended = "the log stream ended"
        except (ApiError, TransportError) as exc:
            ended = str(getattr(exc, "message", "") or exc)
        await lines.put(None)

    async with caller.client:
        reader = asyncio.create_task(read())
        try:
            yield "retry: 2000\n\n"
            while True:
                try:
                    line = await asyncio.wait_for(lines.get(), KEEPALIVE)
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                if line is None:
                    yield f"event: ended\ndata: {json.dumps(ended)}\n\n"
                    return
                yield f"event: line\ndata: {json.dumps(line)}\n\n"
        finally:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader


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

    async def machine(request: Request, caller: Caller) -> Response:
        name = request.path_params["name"]
        service, kernel = _source(request)
        shown = await caller.client.get("machines", name, NAMESPACE)
        refused = ""
        lines: list[str] = []
        try:
            async for line in caller.client.machine_log(
                name, NAMESPACE, service=service, kernel=kernel, tail=LOG_LINES, timestamps=True
            ):
                lines.append(line)
        except ApiError as exc:
            refused = exc.message
        history = None
        with contextlib.suppress(NotFound, Forbidden):  # none yet, or not the caller's to read
            history = await caller.client.get("machineconfighistories", name, NAMESPACE)
        context = {
            "machine": shown,
            "source": KERNEL_SOURCE if kernel else service or "",
            "lines": lines,
            "refused": refused,
            "history": list(reversed((history.spec or {}).get("entries") or [])) if history else [],
            "may_read_history": history is not None
            or not caller.why_not("get", "MachineConfigHistory", shown),
            "watch": ["machines", "machineconfighistories"],
            "rv": shown.metadata.resource_version or "",
        }
        return web.render(request, "machine.html", context, caller=caller)

    async def log(request: Request) -> Response:
        signed_in = await web.caller_of(request)
        if signed_in is None:
            return Response("not signed in", 401, headers=SECURITY_HEADERS)
        _, caller = signed_in
        try:
            service, kernel = _source(request)
        except BadInput as exc:
            return Response(str(exc), 400, headers=SECURITY_HEADERS)
        events = _log_events(caller, request.path_params["name"], service, kernel)
        headers = {**SECURITY_HEADERS, "X-Accel-Buffering": "no"}
        return StreamingResponse(events, media_type="text/event-stream", headers=headers)

    return [
        Route("/machines", web.page(machines), methods=["GET"]),
        Route("/machines/{name}", web.page(machine), methods=["GET"]),
        Route("/machines/{name}/log", log, methods=["GET"]),
        Route("/machines/{name}/power", web.form(power), methods=["POST"]),
    ]
