"""``herder serve``: the data directory, TLS, the store, first-start bootstrap and the HTTPS server.

On first start the data directory gets a CA and serving certificate, an encryption key (unless a
key file shared by replicas is given), the ``default`` namespace, the ``admin`` ServiceAccount and
``admin.kubeconfig`` (mode 0600), so that ``kubectl --kubeconfig DIR/admin.kubeconfig get ns``
works with no other step. Background work (the controller manager) is given in by the composition
root, the CLI, and runs beside the server until it stops, as does the pruning of the audit trail.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import signal
import socket
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar, Protocol

import uvicorn
import yaml
from starlette.applications import Starlette
from starlette.responses import RedirectResponse
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from herder.api import cluster_access, tokens
from herder.api.actions import ObjectAction
from herder.api.app import Scrape, build_app
from herder.api.audit import AuditLog
from herder.api.audit_retention import AuditPruner, Retention
from herder.api.cluster_access import AccessPolicies
from herder.api.datadir import ADMIN, DEFAULT_LISTEN, KUBECONFIG, write_kubeconfig
from herder.api.listening import tcp_listener
from herder.api.lockout import LastAdmin
from herder.api.oidc import IdentityProvider, OidcSettings
from herder.api.people import People
from herder.api.policy import HerderPolicy
from herder.api.sessions import IDLE, MAX_AGE, Sessions
from herder.api.support import Support, read_support_token
from herder.api.tls import TlsFiles, ensure_tls
from herder.krm.app import MAX_BODY_BYTES
from herder.krm.policy import Unauthenticated
from herder.krm.takeover import TakeoverProtocol
from herder.resources import Resource
from herder.resources.access import SERVICE_ACCOUNT
from herder.resources.catalog import herder_registry
from herder.state.encryption import read_key_file
from herder.state.errors import AlreadyExists
from herder.state.machine_logs import MachineLogs
from herder.state.store import SYSTEM, Store
from herder.state.url import KEY_FILE, open_store

log = logging.getLogger("herder.serve")

AUDIT_LOG = "audit.log"

# How long background work (the controllers) gets to stop once the server has.
STOP_GRACE = 10.0


class Background(Protocol):
    """Work that runs beside the API server until told to stop: the controller manager, which runs
    the controllers only while this replica leads (``herder.runtime.Manager`` has this shape).
    """

    async def run(self) -> None: ...

    def stop(self) -> None: ...


# Makes one piece of background work over the server's store.
BackgroundFactory = Callable[[Store], Background]
# Runs once the server listens (the demo seeds its objects and prints how to reach them).
Ready = Callable[[Store], Coroutine[Any, Any, None]]
# Readies the store before anything is served (the admission checks of herder's kinds).
Prepare = Callable[[Store], None]
# Makes the object actions the API serves (a cluster's kubeconfig…) over the server's store.
ActionsFactory = Callable[[Store], Sequence[ObjectAction]]
# Makes another server beside the API, which records in its audit trail (the Talos API gateway); it may
# listen already once made, so that a port in use ends the start.
ServiceFactory = Callable[[Store, AuditLog], Background]


class UiFactory(Protocol):
    """Makes an app served beside the API under ``UI_PATH`` (the web UI), from the API's own app and
    policy, so that it reaches objects through exactly the API's authorization, admission and audit;
    ``ca_pem`` is the CA of herder's serving certificate (None: a public one), for what it hands out."""

    def __call__(self, api: ASGIApp, policy: HerderPolicy, *, ca_pem: bytes | None) -> ASGIApp: ...


class Mounted(Protocol):
    """An app served beside the API under its own ``prefix`` (the Kubernetes API proxy), with what it
    holds to close when the server stops."""

    prefix: str

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None: ...

    async def close(self) -> None: ...


# Makes a mounted app from the server's store, policy and audit trail.
MountFactory = Callable[[Store, HerderPolicy, AuditLog], Mounted]
# Makes what brings metrics computed from the store up to date before each scrape of /metrics.
ScrapeFactory = Callable[[Store], Scrape]


class _Connections(TakeoverProtocol):
    """The API's connections; those an application took over (the proxy's tunnels) are cut on stop."""

    taken: ClassVar[set[asyncio.Transport]] = set()

    def adopted(self, transport: asyncio.Transport) -> None:
        _Connections.taken = {t for t in _Connections.taken if not t.is_closing()} | {transport}

    @classmethod
    def cut(cls) -> None:
        for transport in cls.taken:
            transport.abort()
        cls.taken = set()


UI_PATH = "/ui"


@dataclass(frozen=True)
class ServeOptions:
    data_dir: Path
    listen: str = DEFAULT_LISTEN
    # Default: SQLite in the data directory.
    state: str | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # The CA that clients should trust for an operator-provided certificate (written to the kubeconfig).
    tls_ca: Path | None = None
    # The key sealing sensitive kinds, shared by replicas (default: DATA_DIR/encryption.key, made on first start).
    encryption_key_file: Path | None = None
    audit_retention: Retention = field(default_factory=Retention)
    # Default: krm's, as Kubernetes's (3 MiB).
    max_body_bytes: int | None = None
    # The file holding the platform's Support token (no Support role without one).
    support_token_file: Path | None = None
    # More names of the serving certificate herder issues: the address replicas are reached behind.
    tls_sans: tuple[str, ...] = ()
    # People sign in through this OpenID Connect provider (``--oidc-…``); None: tokens only.
    oidc: OidcSettings | None = None
    # The web UI's sessions end after this long unused, and this long after they began.
    session_idle: timedelta = IDLE
    session_max_age: timedelta = MAX_AGE

    @property
    def state_url(self) -> str:
        return self.state or f"sqlite://{(self.data_dir / 'herder.db').resolve()}"


def with_ui(api: ASGIApp, policy: HerderPolicy, ui: UiFactory, ca_pem: bytes | None) -> ASGIApp:
    """The API app with the UI ``ui`` makes of it served beside it, under ``UI_PATH``."""
    # The address users type (and the demo prints) has no trailing slash, which a Mount does not match.
    to_ui = Route(UI_PATH, lambda _: RedirectResponse(UI_PATH + "/", status_code=307))
    return Starlette(routes=[to_ui, Mount(UI_PATH, app=ui(api, policy, ca_pem=ca_pem)), Mount("", app=api)])


def parse_listen(listen: str, option: str = "--listen") -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) as a host and a port; errors name ``option``."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{option} {listen!r}: expected HOST:PORT, as in {DEFAULT_LISTEN}")
    host = host.strip("[]") or "127.0.0.1"
    # An address is kept in its canonical form: it goes into the URLs herder hands out (kubeconfigs,
    # siderolink.api), and gRPC's hostname check compares that text with the certificate's address.
    with contextlib.suppress(ValueError):
        host = str(ipaddress.ip_address(host))
    return host, int(port)


def host_port(host: str, port: int) -> str:
    """Where clients reach a server listening on ``host``: a wildcard address is reached through loopback."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def server_url(host: str, port: int) -> str:
    """The URL clients use."""
    return f"https://{host_port(host, port)}"


def _existing_token(path: Path) -> str | None:
    with contextlib.suppress(OSError, yaml.YAMLError, AttributeError, IndexError, KeyError, TypeError):
        token = yaml.safe_load(path.read_text())["users"][0]["user"]["token"]
        return token if isinstance(token, str) else None
    return None


async def _ensure(store: Store, obj: dict[str, Any]) -> None:
    with contextlib.suppress(AlreadyExists):
        await store.create(Resource.model_validate(obj), actor=SYSTEM)


async def bootstrap(store: Store, data_dir: Path, server: str, ca_pem: bytes | None) -> Path:
    """Make what a fresh server needs: the default namespace, the admin account and its kubeconfig.

    A kubeconfig whose token still works keeps it (only the server URL and CA are brought up to date);
    otherwise the admin gets a new token.
    """
    await _ensure(
        store,
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "default"},
            "status": {"phase": "Active"},
        },
    )
    await _ensure(
        store,
        {
            "apiVersion": SERVICE_ACCOUNT.api_version,
            "kind": SERVICE_ACCOUNT.kind,
            "metadata": {"name": ADMIN},
            "spec": {"role": "Admin", "description": "made by herder serve on first start"},
        },
    )
    path = data_dir / KUBECONFIG
    token = _existing_token(path)
    if token is not None:
        try:
            await tokens.authenticate(store, token)
        except Unauthenticated:
            token = None
    if token is None:
        token = (await tokens.issue(store, SERVICE_ACCOUNT, ADMIN, description="admin.kubeconfig")).token
    write_kubeconfig(path, server, ca_pem, token)
    return path


# How long an idle client connection is kept open (nginx's default).
KEEP_ALIVE = 75


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, on_started: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_started = on_started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._on_started()

    # herder handles SIGTERM and SIGINT itself: uvicorn would re-raise them after shutting down,
    # turning a clean stop into a KeyboardInterrupt or a death by signal.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def listen_socket(host: str, port: int) -> socket.socket:
    """The API's listening socket, bound before anything else is made: a port in use ends the start at
    once, with one line saying so."""
    try:
        return tcp_listener(host, port, backlog=2048)
    except OSError as exc:
        where = host_port(host, port) if host not in ("0.0.0.0", "::") else f"{host}:{port}"
        if exc.errno == errno.EADDRINUSE:
            raise OSError(
                f"{where}, where herder's API listens, is in use: free it or move it with --listen"
            ) from None
        raise OSError(f"--listen {where}: cannot listen there: {exc.strerror or exc}") from None


class Draining:
    """The API app, which ends its open streams (watches, the web UI's live updates) once the server
    stops: their requests hear that the client left, and each open response gets its last chunk, so
    that clients see a stream that ended (and watch again) rather than one cut after a grace period."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.stopping = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = complete = False

        async def sending(message: Message) -> None:
            nonlocal started, complete
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                complete = True
            await send(message)

        async def receiving() -> Message:
            if self.stopping.is_set():
                return {"type": "http.disconnect"}
            received = asyncio.ensure_future(receive())
            stopped = asyncio.ensure_future(self.stopping.wait())
            await asyncio.wait({received, stopped}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if received.done():
                return received.result()
            received.cancel()
            return {"type": "http.disconnect"}

        await self.app(scope, receiving, sending)
        if started and not complete and self.stopping.is_set():
            with contextlib.suppress(Exception):
                await send({"type": "http.response.body", "body": b"", "more_body": False})


def _tls(options: ServeOptions, host: str) -> TlsFiles:
    if options.tls_cert or options.tls_key:
        if not (options.tls_cert and options.tls_key):
            raise ValueError("--tls-cert and --tls-key go together")
        return TlsFiles(options.tls_cert, options.tls_key, options.tls_ca)
    return ensure_tls(options.data_dir, [host, *options.tls_sans])


async def serve(
    options: ServeOptions,
    *,
    background: Sequence[BackgroundFactory] = (),
    ready: Ready | None = None,
    prepare: Sequence[Prepare] = (),
    actions: ActionsFactory | None = None,
    services: Sequence[ServiceFactory] = (),
    ui: UiFactory | None = None,
    mounts: Sequence[MountFactory] = (),
    machine_logs: MachineLogs | None = None,
    scrape: Sequence[ScrapeFactory] = (),
) -> None:
    """Serve until SIGTERM or SIGINT, then stop the server, the services beside it and the background
    work, and close the store (and ``machine_logs``, which the API serves and background work fills)."""
    host, port = parse_listen(options.listen)
    # A key file given is checked before anything is made: a bad one is a one-line error.
    key = read_key_file(options.encryption_key_file) if options.encryption_key_file else None
    support_token = read_support_token(options.support_token_file) if options.support_token_file else None
    # The identity provider is asked at start: a wrong issuer is a one-line error now, not at a sign-in.
    provider = await IdentityProvider.discover(options.oidc) if options.oidc else None
    listener = listen_socket(host, port)
    try:
        options.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        tls = _tls(options, host)
        store = await open_store(
            options.state_url, herder_registry(), key=key, key_file=options.data_dir / KEY_FILE
        )
    except BaseException:
        listener.close()
        raise
    LastAdmin(store).register(store.admission)
    for step in prepare:
        step(store)
    cluster_access.register_admission(store.admission)
    rules = AccessPolicies(store)
    pruner = AuditPruner(store, options.audit_retention)
    audit = AuditLog(store, options.data_dir / AUDIT_LOG, on_stored=pruner.recorded)
    workers: list[Background] = [pruner, *(make(store) for make in background)]
    tasks: list[asyncio.Task[None]] = []
    mounted: list[Mounted] = []
    try:
        workers.extend(make(store, audit) for make in services)
        url = server_url(host, port)
        ca_pem = tls.ca.read_bytes() if tls.ca else None
        kubeconfig = await bootstrap(store, options.data_dir, url, ca_pem)
        await rules.start()
        policy = HerderPolicy(
            store,
            audit,
            support=Support(store, support_token),
            access=rules,
            people=People(store, provider) if provider is not None else None,
            sessions=Sessions(store, idle=options.session_idle, max_age=options.session_max_age),
        )
        app: ASGIApp = build_app(
            store,
            policy,
            actions(store) if actions else (),
            max_body_bytes=options.max_body_bytes or MAX_BODY_BYTES,
            machine_logs=machine_logs,
            scrape=[make(store) for make in scrape],
        )
        if ui is not None:
            app = with_ui(app, policy, ui, ca_pem)
        mounted = [make(store, policy, audit) for make in mounts]
        if mounted:
            app = Starlette(routes=[*(Mount(m.prefix, app=m) for m in mounted), Mount("", app=app)])
        draining = Draining(app)
        config = uvicorn.Config(
            draining,
            # Applications may take connections over (the proxy's exec and port-forward tunnels).
            http=_Connections,
            ws="none",
            host=host,
            port=port,
            ssl_certfile=str(tls.cert),
            ssl_keyfile=str(tls.key),
            log_config=None,
            access_log=False,
            lifespan="off",
            # Clients are who they connect from: a forwarded-for header must not dodge the limit of
            # failed authentication, nor put another address in the audit trail.
            proxy_headers=False,
            # Watches stay open for minutes; a stopping server does not wait for their clients.
            timeout_graceful_shutdown=2,
            # Idle connections stay open longer than clients keep them (herder's client: 30 s), so a
            # client never sends on a connection the server is closing at that moment (uvicorn's
            # default, 5 s, is httpx's too: a busy caller's request then met a closed connection).
            timeout_keep_alive=KEEP_ALIVE,
        )

        def started() -> None:
            log.info("herder serving on %s (state %s)", url, _redacted(options.state_url))
            log.info("admin kubeconfig: %s", kubeconfig)
            tasks.extend(asyncio.create_task(worker.run()) for worker in workers)
            if ready is not None:
                tasks.append(asyncio.create_task(ready(store)))
            for task in tasks:
                task.add_done_callback(_report_failure)

        server = _Server(config, started)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, _stopper(server, sig, draining, workers))
        await server.serve(sockets=[listener])
    finally:
        listener.close()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().remove_signal_handler(sig)
        _Connections.cut()
        for app_ in mounted:
            await app_.close()
        for worker in workers:
            worker.stop()
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=STOP_GRACE)
            for task in late:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        await rules.stop()
        audit.close()
        if machine_logs is not None:
            machine_logs.close()
        await store.close()
        if provider is not None:
            await provider.close()
    log.info("herder stopped")


def _report_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("background work failed", exc_info=task.exception())


def _stopper(
    server: uvicorn.Server, sig: signal.Signals, draining: Draining, workers: Sequence[Background]
) -> Callable[[], None]:
    def stop() -> None:
        log.info("%s: stopping", sig.name)
        # A second signal while stopping skips the wait for open connections.
        server.force_exit = server.should_exit
        server.should_exit = True
        draining.stopping.set()
        # The work beside the server stops with it, not after it: an in-server provider would otherwise
        # keep calling an API that no longer answers.
        for worker in workers:
            worker.stop()

    return stop


def _redacted(url: str) -> str:
    """A state URL without any password it may carry."""
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    return f"{scheme}{sep}{creds.partition(':')[0]}:***@{host}" if at else url
