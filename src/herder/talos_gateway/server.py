"""The gateway's gRPC server: mutual TLS with the gateway's CA (a client without a talosconfig's
certificate does not get past the handshake), the relay behind it, beside herder's HTTPS API.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from herder.api.audit import AuditLog
from herder.api.cluster_access import AccessPolicies
from herder.state.store import Store
from herder.talos_gateway.authority import GatewayAuthority
from herder.talos_gateway.callers import Callers
from herder.talos_gateway.relay import Relay
from herder.talos_gateway.trail import CallTrail
from herder.talos_gateway.upstreams import Upstreams

log = logging.getLogger("herder.talos_gateway")

MAX_MESSAGE = 32 << 20
"""Talos's largest gRPC message (``constants.GRPCMaxMessageSize``)."""
# How long open calls (event streams, watches) may go on once herder stops.
STOP_GRACE = 2.0


class GatewayServer:
    """Listens from the moment it is made (a port in use is an error at once); serves from ``run`` until
    ``stop``."""

    def __init__(
        self,
        store: Store,
        audit: AuditLog,
        authority: GatewayAuthority,
        host: str,
        port: int,
        *,
        support: bool,
    ) -> None:
        self._upstreams = Upstreams(store)
        self._rules = AccessPolicies(store)
        callers = Callers(store, support=support, rules=self._rules)
        self._relay = Relay(store, callers, self._upstreams, CallTrail(audit))
        self._address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        material = authority.serving([host])
        self._server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE),
                ("grpc.max_send_message_length", MAX_MESSAGE),
                # Without this a second server could bind the same port and take half the calls.
                ("grpc.so_reuseport", 0),
            ]
        )
        self._server.add_generic_rpc_handlers(self._relay.handlers())
        credentials = grpc.ssl_server_credentials(
            [(material.key, material.crt)], root_certificates=material.ca, require_client_auth=True
        )
        try:
            self._server.add_secure_port(self._address, credentials)
        except RuntimeError:
            raise OSError(
                f"--talos-listen {self._address}: cannot listen there (is the port in use?)"
            ) from None
        self._stopping = asyncio.Event()

    async def run(self) -> None:
        await self._rules.start()
        await self._server.start()
        log.info("Talos API gateway serving on %s", self._address)
        try:
            await self._stopping.wait()
        finally:
            await self._server.stop(STOP_GRACE)
            await self._relay.drain()
            await self._upstreams.close()
            await self._rules.stop()

    def stop(self) -> None:
        self._stopping.set()
