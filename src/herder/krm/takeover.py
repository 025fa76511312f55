"""Connections an application takes over from the HTTP server: for upgrades ASGI has no words for.

ASGI speaks HTTP and WebSocket, but Kubernetes clients also upgrade to SPDY (exec, port-forward), and a
proxy wants the bytes of either, not WebSocket messages. Served with ``TakeoverProtocol`` (uvicorn's
httptools protocol: ``uvicorn.Config(http=TakeoverProtocol, ws="none")``), every HTTP request's scope
carries the extension ``TAKEOVER``: a ``TakeOver`` callable that, given an ``asyncio.Protocol``, ends
uvicorn's handling of the request and hands it the connection as it is (its ``connection_made`` is
called; it writes the upgrade's answer itself). Upgrades are the application's to accept: uvicorn no
longer warns of them or answers them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, MutableMapping
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

TAKEOVER = "herder.takeover"

TakeOver = Callable[[asyncio.BaseProtocol], None]
"""Hand the connection of the request to that protocol (its ``connection_made`` is called)."""

_ASGI = Any  # ASGI callables, as uvicorn types them loosely too


class TakeoverProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol, whose application may take the connection over (``TAKEOVER``).

    Subclasses add to what each request's scope carries (``extensions``) and keep the connections taken
    over (``adopted``), to cut them when their server stops: uvicorn no longer knows them.
    """

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        extensions = {**self.extensions(transport), TAKEOVER: self._take_over}
        app = self.app

        async def wrapped(scope: MutableMapping[str, Any], receive: _ASGI, send: _ASGI) -> None:
            if scope["type"] == "http":
                scope = {**scope, "extensions": {**(scope.get("extensions") or {}), **extensions}}
            await app(scope, receive, send)

        self.app = wrapped

    def extensions(self, transport: asyncio.Transport) -> dict[str, Any]:
        """What else this connection's requests carry in their scope's extensions."""
        return {}

    def adopted(self, transport: asyncio.Transport) -> None:
        """A connection was taken over (a subclass keeps it, to cut it when its server stops)."""

    def _unsupported_upgrade_warning(self) -> None:
        """Every upgrade is the application's to accept or refuse: nothing to warn about."""

    def _take_over(self, protocol: asyncio.BaseProtocol) -> None:
        cycle = self.cycle
        # The request's cycle ends without an answer of uvicorn's: the new protocol writes to the client.
        cycle.response_started = cycle.response_complete = True
        self.connections.discard(self)
        self._unset_keepalive_if_required()
        self.adopted(self.transport)
        self.transport.set_protocol(protocol)
        protocol.connection_made(self.transport)
