"""The gateway's gRPC server: mutual TLS with the gateway's CA (a client without a talosconfig's
certificate does not get past the handshake, and is told so by a TLS alert), the relay behind it, beside
herder's HTTPS API.

TLS is OpenSSL's (Python's ``ssl``, in front of a plaintext gRPC server on loopback that only the front
reaches with a known peer), not grpc's: grpc's TLS closes a refused connection without sending the alert
of why (certificate required, unknown CA), which leaves the client with a bare EOF.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from herder.api.audit import AuditLog
from herder.api.cluster_access import AccessPolicies
from herder.api.listening import tcp_listener
from herder.state.store import Store
from herder.talos.machine import tls as machine_tls
from herder.talos.machine.tunnel import ServerTunnel
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
        self._address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        material = authority.serving([host])
        try:
            listener = tcp_listener(host, port, backlog=256)
        except OSError as e:
            raise OSError(
                f"--talos-listen {self._address}: cannot listen there ({e.strerror or e}; is the port in use?)"
            ) from None
        listener.setblocking(False)
        self._server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE),
                ("grpc.max_send_message_length", MAX_MESSAGE),
                ("grpc.so_reuseport", 0),
            ]
        )
        inner = self._server.add_insecure_port("127.0.0.1:0")
        context = machine_tls.server_context(material.crt, material.key, client_ca=material.ca)
        self._front = ServerTunnel(listener, context, inner)
        self._relay = Relay(
            store,
            Callers(store, support=support, rules=self._rules),
            self._upstreams,
            CallTrail(audit),
            self._front.peers,
        )
        self._server.add_generic_rpc_handlers(self._relay.handlers())
        self._stopping = asyncio.Event()

    async def run(self) -> None:
        await self._rules.start()
        await self._server.start()
        await self._front.start()
        log.info("Talos API gateway serving on %s", self._address)
        try:
            await self._stopping.wait()
        finally:
            await self._server.stop(STOP_GRACE)
            await self._front.close()
            await self._relay.drain()
            await self._upstreams.close()
            await self._rules.stop()

    def stop(self) -> None:
        self._stopping.set()
