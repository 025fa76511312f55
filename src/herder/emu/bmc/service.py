"""The emulated BMCs' Redfish service on the network: HTTPS on one address (the emulator's control address,
its own port), with a certificate from a CA of its own (``ca.pem`` in the data directory, for clients
that check it: ``caFile`` in the Redfish provider's config), served by uvicorn's h11 protocol (which, unlike
httptools, takes any method name: Redfish answers an unknown one 501)."""

from __future__ import annotations

import asyncio
import ssl
from datetime import UTC, datetime, timedelta

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from herder.emu.bmc.redfish import RedfishService
from herder.talos import pki
from herder.talos.machine import tls as machine_tls
from herder.talos.pki import CertificateAndKey, ExtUsage, KeyType, Usage


def new_ca() -> CertificateAndKey:
    """The CA of the emulated BMCs' certificates (kept in the data directory)."""
    return pki.new_ca(KeyType.ECDSA_P256, organization="herder emulator BMCs")


def serving_certificate(ca: CertificateAndKey, host: str) -> CertificateAndKey:
    """The service's certificate for ``host``, signed by ``ca``."""
    now = datetime.now(UTC)
    return pki.issue_certificate(
        ca,
        common_name=host,
        not_before=now - timedelta(minutes=5),
        not_after=now + timedelta(days=3650),
        usage=Usage.DIGITAL_SIGNATURE | Usage.KEY_ENCIPHERMENT,
        ext_usage=ExtUsage.SERVER_AUTH,
        sans=list(dict.fromkeys([host, "localhost"])),
    )


class BmcEndpoint:
    """The service's HTTPS listener on ``host:port`` (port 0: one the system picks)."""

    def __init__(self, service: RedfishService, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._config = uvicorn.Config(
            service.app,
            http=H11Protocol,
            interface="asgi3",
            lifespan="off",
            log_config=None,
            access_log=False,
            proxy_headers=False,
        )
        self._config.load()
        self._state = ServerState()
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"https://{host}:{self.port}"

    async def start(self, serving: CertificateAndKey) -> None:
        context = machine_tls.server_context(serving.crt, serving.key, client_ca=None)
        context.minimum_version = ssl.TLSVersion.TLSv1_2  # BMC clients are often older than apid's
        context.set_alpn_protocols(["http/1.1"])
        self._server = await asyncio.get_running_loop().create_server(
            lambda: H11Protocol(config=self._config, server_state=self._state, app_state={}),
            self.host,
            self.port,
            ssl=context,
            reuse_address=True,
        )
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for connection in list(self._state.connections):
            connection.transport.abort()
        if server is not None:
            await server.wait_closed()
