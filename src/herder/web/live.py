"""Live updates: ``GET /ui/events?watch=clusters,machines&rv=N`` streams server-sent events, one
``change`` per change the signed-in user may see, from the API's watches of those kinds after
revision N (the revision the page was rendered at, so nothing between rendering and listening is lost).
While it streams, the session is checked again every ``CHECK_EVERY`` seconds: a session that ended (signed
out elsewhere, its User disabled or deleted, its token revoked) gets ``signedout``, and the page reloads
to the sign-in page.

Each watch goes through the API as the user, so hidden objects never show up in the stream. A watch the
API ends (its timeout) is resumed from the last revision seen; one from a revision the store no longer
keeps (410) lists again and tells the page to refresh (``relist``). The page's script coalesces the
changes into at most one refresh of its live region at a time: the browser asks for the region only
after changes, never on a timer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from herder.client.errors import ApiError, Gone, TransportError
from herder.resources.errors import UnknownKind
from herder.web.caller import Caller
from herder.web.site import SECURITY_HEADERS, Web

# A comment line this often keeps proxies and the browser from closing an idle stream.
KEEPALIVE = 15.0
# How long one watch of the API lasts before it is resumed (the API's own default is longer).
WATCH_SECONDS = 300
# After a broken watch, wait this long before watching again.
RETRY = 1.0
MAX_KINDS = 8
# How often an open stream's session is checked again (a User disabled ends their pages within 5 s).
CHECK_EVERY = 2.0


async def follow(caller: Caller, plural: str, rv: str, out: asyncio.Queue[dict[str, str]]) -> None:
    """Put every visible change of ``plural`` after ``rv`` on ``out``, until cancelled or refused."""
    while True:
        try:
            async for event in caller.client.watch(
                plural, resource_version=rv, timeout_seconds=WATCH_SECONDS
            ):
                rv = event.object.metadata.resource_version or rv
                if event.type != "BOOKMARK":
                    await out.put({"kind": plural, "type": event.type, "name": event.object.name, "rv": rv})
            # The API ended the watch (its timeout): go on from the last revision seen.
        except Gone:
            try:
                rv = (await caller.client.list(plural, limit=1)).resource_version
            except TransportError:
                await asyncio.sleep(RETRY)
                continue
            await out.put({"kind": plural, "type": "RELIST", "name": "", "rv": rv})
        except ApiError as exc:
            # Refused (signed out, token revoked): the page is told, and stops listening.
            await out.put({"kind": plural, "type": "ENDED", "name": "", "rv": rv, "message": exc.message})
            return
        except TransportError:
            await asyncio.sleep(RETRY)


async def signed_in(web: Web, request: Request, out: asyncio.Queue[dict[str, str]]) -> None:
    """Put ``SIGNEDOUT`` on ``out`` once the request's session no longer authenticates."""
    while True:
        await asyncio.sleep(CHECK_EVERY)
        if await web.signed_in(request) is None:
            await out.put({"kind": "", "type": "SIGNEDOUT", "name": "", "rv": ""})
            return


async def stream(
    caller: Caller, kinds: list[str], rv: str, web: Web | None = None, request: Request | None = None
) -> AsyncIterator[str]:
    changes: asyncio.Queue[dict[str, str]] = asyncio.Queue()
    async with caller.client:
        tasks = [asyncio.create_task(follow(caller, kind, rv, changes)) for kind in kinds]
        if web is not None and request is not None:
            tasks.append(asyncio.create_task(signed_in(web, request, changes)))
        try:
            yield f"retry: {int(RETRY * 2000)}\n\n"
            while True:
                try:
                    change = await asyncio.wait_for(changes.get(), KEEPALIVE)
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                name = {"RELIST": "relist", "ENDED": "ended", "SIGNEDOUT": "signedout"}.get(
                    change["type"], "change"
                )
                yield f"event: {name}\ndata: {json.dumps(change)}\n\n"
                if name in ("ended", "signedout"):
                    return
        finally:
            for task in tasks:
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.gather(*tasks, return_exceptions=True)


def routes(web: Web) -> list[BaseRoute]:
    async def events(request: Request) -> Response:
        signed_in = await web.caller_of(request)
        if signed_in is None:
            return Response("not signed in", 401, headers=SECURITY_HEADERS)
        _, caller = signed_in
        kinds = [k for k in request.query_params.get("watch", "").split(",") if k][:MAX_KINDS]
        rv = request.query_params.get("rv", "")
        for kind in kinds:
            try:
                caller.registry.get(kind)
            except UnknownKind:
                return Response(f"watch: unknown kind {kind!r}", 400, headers=SECURITY_HEADERS)
        if not rv.isdigit():
            return Response(
                "rv: the revision the page was rendered at is required", 400, headers=SECURITY_HEADERS
            )
        headers = {**SECURITY_HEADERS, "X-Accel-Buffering": "no"}
        return StreamingResponse(
            stream(caller, kinds, rv, web, request), media_type="text/event-stream", headers=headers
        )

    return [Route("/events", events, methods=["GET"])]
