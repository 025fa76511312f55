"""The HTTPS endpoints of one emulated cluster's Kubernetes API: ``krm`` served by uvicorn's HTTP protocol on
TLS listeners of our own, one per control plane on its own address and kube-apiserver's port (6443), each
with the serving certificate that control plane's kube-apiserver would have (signed by the cluster's
Kubernetes CA, for the node's address and the config's SANs) and client-certificate authentication
against that CA.

uvicorn does not pass the client's certificate to the application, so each connection's verified
certificate is handed to it through the ASGI TLS extension (``scope["extensions"]["tls"]``), which
``authentication`` reads. A listener is bound only while its control plane runs kube-apiserver: otherwise
connections are refused, and closing it cuts the open ones (watches and streams too).

Upgrades (WebSocket, SPDY/3.1: exec, attach, port-forward) reach the application as plain HTTP requests
that may take their connection over (``krm.takeover``) for the protocol the application accepted them
for (``upgrades``).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import uvicorn
from cryptography import x509
from uvicorn.server import ServerState

from herder.emu import netns
from herder.krm.takeover import TakeoverProtocol
from herder.talos import pki
from herder.talos.machine import tls as machine_tls
from herder.talos.pki import CertificateAndKey, ExtUsage, Usage

PORT = 6443
"""kube-apiserver's port."""
SERVICE_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc")
_ASGI = Any  # ASGI callables, as uvicorn types them loosely too


def serving_certificate(ca: CertificateAndKey, sans: Sequence[str]) -> CertificateAndKey:
    """kube-apiserver's serving certificate from the cluster's Kubernetes CA."""
    now = datetime.now(UTC)
    return pki.issue_certificate(
        ca,
        common_name="kube-apiserver",
        not_before=now - timedelta(seconds=10),
        not_after=now + timedelta(days=365),
        usage=Usage.DIGITAL_SIGNATURE | Usage.KEY_ENCIPHERMENT,
        ext_usage=ExtUsage.SERVER_AUTH,
        sans=list(dict.fromkeys(sans)),
    )


def tls_extension(ssl_object: ssl.SSLObject | None) -> dict[str, Any]:
    """The ASGI TLS extension of a connection: the client's verified certificate (PEM) and its name."""
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    chain: list[str] = []
    name = None
    if der:
        cert = x509.load_der_x509_certificate(der)
        chain = [ssl.DER_cert_to_PEM_cert(der)]
        name = cert.subject.rfc4514_string()
    version = ssl_object.version() if ssl_object is not None else None
    return {
        "server_cert": None,
        "client_cert_chain": chain,
        "client_cert_name": name,
        "client_cert_error": None,
        "tls_version": {"TLSv1.3": 0x0304, "TLSv1.2": 0x0303}.get(version or ""),
        "cipher_suite": None,
    }


def with_health_checks(app: _ASGI, etcd_ok: Callable[[], bool]) -> _ASGI:
    """``/healthz``, ``/livez`` and ``/readyz`` as kube-apiserver answers them, to anyone: ``ok``, or the
    failed check (etcd, for health and readiness; liveness does not depend on it)."""

    async def wrapped(scope: dict[str, Any], receive: _ASGI, send: _ASGI) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path not in ("/healthz", "/livez", "/readyz"):
            await app(scope, receive, send)
            return
        healthy = path == "/livez" or etcd_ok()
        body = b"ok" if healthy else f"[-]etcd failed: reason withheld\n{path[1:]} check failed".encode()
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": 200 if healthy else 500, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return wrapped


class _Protocol(TakeoverProtocol):
    endpoint: ApiEndpoint

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if not self.endpoint.serving:
            transport.abort()

    def extensions(self, transport: asyncio.Transport) -> dict[str, Any]:
        return {"tls": tls_extension(transport.get_extra_info("ssl_object"))}

    def adopted(self, transport: asyncio.Transport) -> None:
        self.endpoint.adopt(transport)


def _context(certificate: CertificateAndKey, client_ca: bytes) -> ssl.SSLContext:
    context = machine_tls.server_context(certificate.crt, certificate.key, client_ca=client_ca)
    # kube-apiserver asks for a client certificate but serves anonymous requests too (/version).
    context.verify_mode = ssl.CERT_OPTIONAL
    context.set_alpn_protocols(["http/1.1"])
    return context


class ApiEndpoint:
    """One kube-apiserver's listener on ``host:port``, serving ``app`` between ``start`` and ``close``."""

    def __init__(self, app: _ASGI, host: str, port: int = PORT) -> None:
        self.host = host
        self.port = port
        # No WebSocket of uvicorn's: the application takes upgraded connections over itself (``TAKEOVER``).
        self._config = uvicorn.Config(
            app,
            http=_Protocol,
            ws="none",
            lifespan="off",
            log_config=None,
            access_log=False,
            proxy_headers=False,
            # kube-apiserver keeps an idle connection 90 s (uvicorn: 5 s), which its clients count on.
            timeout_keep_alive=90,
        )
        self._config.load()
        self._state = ServerState()
        self._server: asyncio.Server | None = None
        self._context: ssl.SSLContext | None = None
        self.credentials: tuple[bytes, bytes] = (b"", b"")
        """The CA it serves from and the client CAs it accepts (PEM), as last started or reloaded."""
        self.upgraded: set[asyncio.BaseTransport] = set()
        """The connections handed to another protocol (streams), cut too when the endpoint closes."""

    def adopt(self, transport: asyncio.BaseTransport) -> None:
        """Keep an upgraded connection, to cut it when the endpoint closes."""
        self.upgraded = {t for t in self.upgraded if not t.is_closing()}
        self.upgraded.add(transport)

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def serving(self) -> bool:
        return self._server is not None

    def _protocol(self) -> asyncio.Protocol:
        protocol = _Protocol(config=self._config, server_state=self._state, app_state={})
        protocol.endpoint = self
        return protocol

    async def start(self, certificate: CertificateAndKey, client_ca: bytes, *, issuing: bytes = b"") -> None:
        """Listen with this serving certificate (``OSError`` if the address cannot be bound)."""
        self._context = _context(certificate, client_ca)
        self.credentials = (issuing, client_ca)
        listening = _context(certificate, client_ca)
        # kube-apiserver reloads its certificates without a restart: each handshake takes the newest.
        listening.sni_callback = self._current
        loop = asyncio.get_running_loop()
        inside = await netns.listener(self.host, self.port)
        if inside is not None:  # a joined control plane: in its own namespace, on its tunnel address
            self._server = await loop.create_server(self._protocol, sock=inside, ssl=listening)
        else:
            self._server = await loop.create_server(
                self._protocol, self.host, self.port, ssl=listening, reuse_address=True, backlog=256
            )

    def reload(self, certificate: CertificateAndKey, issuing: bytes, client_ca: bytes) -> None:
        """Serve new connections with another certificate and client CAs; open connections go on."""
        self._context = _context(certificate, client_ca)
        self.credentials = (issuing, client_ca)

    def _current(self, ssl_object: ssl.SSLObject, _name: str | None, _context: ssl.SSLContext) -> None:
        if self._context is not None:
            ssl_object.context = self._context

    async def close(self) -> None:
        """Stop as a stopped API server: new connections are refused, open ones (watches too) are cut."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for connection in list(self._state.connections):
            connection.transport.abort()
        for transport in list(self.upgraded):
            transport.abort()  # type: ignore[attr-defined]
        self.upgraded.clear()
        if server is not None:
            await server.wait_closed()
