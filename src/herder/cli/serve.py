"""``herder serve`` and ``herder demo``: the composition root that wires the API server and controllers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from datetime import timedelta
from ipaddress import IPv6Interface
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from herder.api.audit_retention import DEFAULT_MAX_AGE, DEFAULT_MAX_EVENTS, Retention
from herder.api.datadir import DEFAULT_LISTEN, KUBECONFIG, default_data_dir, write_kubeconfig
from herder.api.oidc import DEFAULT_SCOPES
from herder.api.sessions import IDLE, MAX_AGE
from herder.cli.errors import fail
from herder.cli.ports import check_free
from herder.cli.serve_sso import (
    OidcCaFileOption,
    OidcCliClientIdOption,
    OidcCliClientSecretOption,
    OidcClientIdOption,
    OidcClientSecretFileOption,
    OidcDefaultRoleOption,
    OidcGroupsClaimOption,
    OidcIssuerOption,
    OidcProviderNameOption,
    OidcScopesOption,
    OidcUnverifiedEmailOption,
    SessionIdleOption,
    SessionMaxAgeOption,
    oidc_settings,
)
from herder.client.kubeconfig import load
from herder.emu.options import DEFAULT_MACHINE_CIDR
from herder.resources import Resource
from herder.resources.access import SERVICE_ACCOUNT
from herder.resources.catalog import herder_registry
from herder.state.errors import AlreadyExists, StateError
from herder.state.store import SYSTEM, Store

if TYPE_CHECKING:
    from herder.api.actions import ActionHandler, ObjectAction
    from herder.api.app import Scrape
    from herder.api.serve import (
        Background,
        BackgroundFactory,
        Ready,
        ScrapeFactory,
        ServeOptions,
        ServiceFactory,
    )
    from herder.controllers.backups.policy import BackupPolicy
    from herder.controllers.catalog import ControllerOptions
    from herder.controllers.clusters.credentials import TalosGateway
    from herder.siderolink.server import SideroLinkOptions
    from herder.state.machine_logs import MachineLogs


def controller_manager(options: ControllerOptions, shards: int = 1) -> BackgroundFactory:
    """The controllers: with etcd, run by whichever replica leads, or with ``shards`` above 1 by every
    replica for the shards of the clusters it holds (``herder.runtime.shards``); else by this process
    alone (an embedded store has one writer)."""

    def make(store: Store) -> Background:
        import os
        import socket

        from herder.controllers.catalog import controllers
        from herder.runtime.leader import AlwaysLeader, EtcdLeaderElection
        from herder.runtime.manager import Manager
        from herder.runtime.shards import Leadership, Ownership, ShardLeases, ShardMap
        from herder.state.etcd import EtcdBackend

        identity = f"{socket.gethostname()}-{os.getpid()}"
        ownership: Ownership = Leadership(AlwaysLeader())
        if isinstance(store.backend, EtcdBackend) and shards > 1:
            ownership = ShardLeases(store.backend, "controllers", identity, shards)
        elif isinstance(store.backend, EtcdBackend):
            ownership = Leadership(EtcdLeaderElection(store.backend, "controllers", identity))
        return Manager(
            store, controllers(store, options), ownership=ownership, shards=ShardMap(store, shards)
        )

    return make


log = logging.getLogger("herder.serve")

LoggingService = Callable[["MachineLogs"], "ServiceFactory"]
"""A service the server runs that keeps machine logs (SideroLink's kernel log sink): given the logs."""


def cluster_metrics(options: ServeOptions, controller_options: ControllerOptions) -> ScrapeFactory:
    """The metrics of clusters computed from the store at each scrape of /metrics, with the expiry of
    herder's own certificates (its API's and its Talos API gateway's)."""

    def make(store: Store) -> Scrape:
        from herder.api.tls import CA_CERT, SERVING_CERT
        from herder.controllers.observability.cluster_metrics import install
        from herder.talos_gateway.authority import PREFIX as GATEWAY

        data = options.data_dir
        certificates = [
            ("herder-api", options.tls_cert or data / SERVING_CERT),
            ("herder-ca", data / CA_CERT),
            ("herder-talos-gateway", data / f"{GATEWAY}{SERVING_CERT}"),
            ("herder-talos-gateway-ca", data / f"{GATEWAY}{CA_CERT}"),
        ]
        return install(store, controller_options.backup_policy, certificates).refresh

    return make


def replica_work(options: ControllerOptions, logs: MachineLogs) -> BackgroundFactory:
    """What every replica runs beside the API whoever leads: the machine log collector."""

    def make(store: Store) -> Background:
        from herder.controllers.catalog import replica_controllers
        from herder.runtime.replica import EveryReplica

        return EveryReplica(store, replica_controllers(store, options, logs))

    return make


MACHINE_LOGS = "machine-logs"
"""The folder of the data directory where the machine logs this replica follows are kept."""
DEMO_DIR = Path(".herder-demo")
DEMO_ENDPOINTS = "127.0.0.1:7000-7099"
DEMO_PROVIDER = "emulator"
DEMO_EMULATOR = "127.0.0.1:50080"

DataDirOption = Annotated[Path | None, typer.Option("--data-dir", help="Data directory.", show_default=False)]
SpareKeysOption = Annotated[
    int | None,
    typer.Option(
        "--spare-keys",
        min=0,
        help="RSA keys kept ready, from the start, for new clusters' secrets (each takes a second to "
        "make, at the lowest CPU priority): a burst of this many new clusters starts at once (default: 2, "
        "made once a cluster came; metric herder_spare_keys).",
        show_default=False,
    ),
]
DEFAULT_ENDPOINT_PORTS = "10000-10999"
ClusterEndpointsOption = Annotated[
    str | None,
    typer.Option(
        "--cluster-endpoints",
        help="HOST:FIRST-LAST: where herder's load balancers serve the Kubernetes API of clusters "
        f"without spec.endpoint, one port each (default: the --listen host, ports {DEFAULT_ENDPOINT_PORTS}).",
        show_default=False,
    ),
]
ListenOption = Annotated[str, typer.Option("--listen", help="HOST:PORT to serve HTTPS on.")]
TalosListenOption = Annotated[
    str | None,
    typer.Option(
        "--talos-listen",
        help="HOST:PORT to serve the Talos API gateway on, which talosconfigs point at (default: the "
        "--listen host and the next port, 127.0.0.1:8444).",
        show_default=False,
    ),
]


def object_actions(
    store: Store, talos: TalosGateway | None = None, logs: MachineLogs | None = None
) -> list[ObjectAction]:
    """The object actions herder's API serves, made by the controllers' layer: a cluster's credentials
    (its talosconfig from the Talos API gateway), a backup of it now, its support bundle (with the machine
    logs in ``logs``), and the force release of a machine request."""
    from herder.api.actions import ActionFailed, ObjectAction
    from herder.controllers.backups.requests import BackupRefused
    from herder.controllers.catalog import (
        backup_requests,
        cluster_credentials,
        import_secrets,
        machine_request_release,
        support_bundles,
    )
    from herder.controllers.clusters.cluster_import import ImportRefused
    from herder.controllers.clusters.credentials import CredentialsUnavailable
    from herder.controllers.provisioning.release import ReleaseRefused

    credentials = cluster_credentials(store, talos)

    def action(
        name: str, handler: ActionHandler, media_type: str = "application/yaml", kind: str = "Cluster"
    ) -> ObjectAction:
        async def run(obj: Resource, user: str, role: str, options: dict[str, Any]) -> bytes:
            try:
                return await handler(obj, user, role, options)
            except (CredentialsUnavailable, BackupRefused) as exc:
                raise ActionFailed(409, str(exc)) from None
            except ReleaseRefused as exc:
                raise ActionFailed(400, str(exc)) from None
            except ImportRefused as exc:
                raise ActionFailed(exc.code, str(exc)) from None

        return ObjectAction(kind, name, run, media_type)

    return [
        action("kubeconfig", credentials.kubeconfig),
        action("talosconfig", credentials.talosconfig),
        action("talosconfig-break-glass", credentials.break_glass_talosconfig),
        action("backup", backup_requests(store).request, "application/json"),
        action("support", support_bundles(store, logs).bundle, "application/zip"),
        action("release", machine_request_release(store), kind="MachineRequest"),
        action("import", import_secrets(store).give, "application/json"),
    ]


def _run(
    options: ServeOptions,
    controller_options: ControllerOptions,
    ready: Ready | None = None,
    background: Sequence[BackgroundFactory] = (),
    talos_listen: str | None = None,
    around: Callable[[], AbstractAsyncContextManager[None]] | None = None,
    machine_log_bytes: int | None = None,
    services: Sequence[LoggingService] = (),
    shards: int = 1,
) -> None:
    """Serve until SIGTERM or SIGINT; ``around`` is started before the server and stopped after it (the
    demo's emulator), so that a failure to start it ends the start."""
    gateway_listen = talos_listen or _next_port(options.listen)
    check_free(options.listen, "herder's API", "--listen")
    check_free(gateway_listen, "the Talos API gateway", "--talos-listen")
    # The server's imports (uvicorn, krm, the controllers) load only for the commands that serve.
    from herder.api.serve import serve
    from herder.controllers.catalog import register_admission
    from herder.kube_proxy.proxy import KubeProxy
    from herder.state.machine_logs import DEFAULT_BUDGET, MachineLogs
    from herder.talos_gateway.gateway import TalosGateway
    from herder.web.app import build as web_ui

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # A line per request drowns what matters: the web UI makes one per API call it serves a page with.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    from herder.state import open_files

    files = open_files.raise_limit()
    try:
        logs = MachineLogs(options.data_dir / MACHINE_LOGS, machine_log_bytes or DEFAULT_BUDGET)
        work = [
            controller_manager(controller_options, shards),
            replica_work(controller_options, logs),
            *background,
        ]
        gateway = TalosGateway(
            options.data_dir, gateway_listen, support=options.support_token_file is not None
        )

        async def started(store: Store) -> None:
            log.info("open files: up to %d (each machine followed takes four, each cluster two)", files)
            endpoints = controller_options.cluster_endpoints
            if endpoints is not None:
                host = f"[{endpoints.host}]" if ":" in endpoints.host else endpoints.host
                log.info(
                    "cluster endpoints: %s:%d-%d (load balancers of clusters without spec.endpoint; "
                    "--cluster-endpoints moves them)",
                    host,
                    endpoints.first,
                    endpoints.last,
                )
            if ready is not None:
                await ready(store)

        async def main() -> None:
            async with around() if around is not None else contextlib.nullcontext():
                await serve(
                    options,
                    background=work,
                    ready=started,
                    prepare=[lambda store: register_admission(store, controller_options)],
                    actions=lambda store: object_actions(store, gateway.talosconfigs(store), logs),
                    services=[gateway.service, *(service(logs) for service in services)],
                    ui=web_ui,
                    mounts=[KubeProxy],
                    machine_logs=logs,
                    scrape=[cluster_metrics(options, controller_options)],
                )

        asyncio.run(main())
    except (OSError, ValueError, StateError) as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        # Ctrl+C before the server took over the signals (while it starts): a stop, not a crash.
        raise typer.Exit(130) from None
    _exit_stopped()


def _exit_stopped() -> None:
    """End the process of a server that stopped cleanly, now. Everything it keeps is closed by then (the
    store, the audit log); what is left is the interpreter tearing down its modules and objects one by
    one, which takes seconds on a busy machine after a server ran a while, for nothing the user waits for."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _next_port(listen: str) -> str:
    """The Talos API gateway's default address: the API's host, the API's port + 1."""
    host, _, port = listen.rpartition(":")
    return f"{host}:{int(port) + 1}" if port.isdigit() else listen


def serve_command(
    data_dir: DataDirOption = None,
    listen: ListenOption = DEFAULT_LISTEN,
    state: Annotated[
        str | None,
        typer.Option(
            "--state", help="sqlite:///PATH (default: in the data dir), memory:// or etcd://HOST:PORT[,…]"
        ),
    ] = None,
    tls_cert: Annotated[Path | None, typer.Option("--tls-cert", help="Serving certificate (PEM).")] = None,
    tls_key: Annotated[Path | None, typer.Option("--tls-key", help="Its private key (PEM).")] = None,
    tls_ca: Annotated[
        Path | None, typer.Option("--tls-ca", help="CA of --tls-cert, written to the admin kubeconfig.")
    ] = None,
    tls_san: Annotated[
        list[str] | None,
        typer.Option(
            "--tls-san",
            help="Another host name or IP of the serving certificate herder issues from its CA: the "
            "address replicas are reached behind. Repeatable.",
            show_default=False,
        ),
    ] = None,
    encryption_key_file: Annotated[
        Path | None,
        typer.Option(
            "--encryption-key-file",
            help="Key sealing sensitive kinds, one file shared by every replica: 32 raw bytes, mode 0600 "
            "(default: DATA_DIR/encryption.key, made on first start).",
        ),
    ] = None,
    audit_max_age_days: Annotated[
        int, typer.Option("--audit-max-age-days", min=1, help="Audit events older than this are deleted.")
    ] = DEFAULT_MAX_AGE.days,
    audit_max_events: Annotated[
        int,
        typer.Option(
            "--audit-max-events", min=1, help="The oldest audit events beyond this many are deleted."
        ),
    ] = DEFAULT_MAX_EVENTS,
    max_body_bytes: Annotated[
        int | None,
        typer.Option(
            "--max-body-bytes",
            min=1024,
            help="Larger request bodies are answered 413 (default: 3 MiB).",
            show_default=False,
        ),
    ] = None,
    cluster_endpoints: ClusterEndpointsOption = None,
    spare_keys: SpareKeysOption = None,
    talos_listen: TalosListenOption = None,
    support_token_file: Annotated[
        Path | None,
        typer.Option(
            "--support-token-file",
            help="A file (mode 0600) holding the bearer token of the platform's Support role: every request "
            "made with it is audited; Support may act as any identity with kubectl --as=NAME.",
            show_default=False,
        ),
    ] = None,
    managed_control_planes: Annotated[
        bool,
        typer.Option(
            "--managed-control-planes",
            help="Offer managed control planes: clusters whose control planes the platform runs on the "
            "machines of a provider whose spec.managedControlPlanes Support wrote.",
        ),
    ] = False,
    managed_replace_after: Annotated[
        float,
        typer.Option(
            "--managed-replace-after",
            min=1,
            help="Seconds a managed control plane machine stays unreachable before it is replaced.",
        ),
    ] = 300.0,
    manifest_resync: Annotated[
        float,
        typer.Option(
            "--manifest-resync",
            min=1,
            help="Seconds between syncs of each ClusterManifest into its cluster (each reverts drift).",
        ),
    ] = 60.0,
    managed_backups: Annotated[
        str,
        typer.Option(
            "--managed-backups",
            help="INTERVAL:RETENTION (or STORE too: INTERVAL:RETENTION:STORE): the etcd backups of every "
            "managed cluster, which its users cannot change or turn off.",
        ),
    ] = "1h:24",
    machine_log_bytes: Annotated[
        int | None,
        typer.Option(
            "--machine-log-bytes",
            min=256 * 1024,
            help="Bytes of logs (its services' and its kernel's) kept per machine; the oldest go first "
            "(default: 5 MiB). In DATA_DIR/machine-logs, of every machine herder follows.",
            show_default=False,
        ),
    ] = None,
    siderolink_listen: Annotated[
        str | None,
        typer.Option(
            "--siderolink-listen",
            help="HOST:PORT to serve SideroLink's Provision API on, which machines booted with the kernel "
            "arguments of a JoinConfig call to join (needs --siderolink-wireguard).",
            show_default=False,
        ),
    ] = None,
    siderolink_wireguard: Annotated[
        str | None,
        typer.Option(
            "--siderolink-wireguard",
            help="HOST:PORT of herder's WireGuard endpoint as joining machines reach it (UDP; herder "
            "listens on that port on every address). Needs CAP_NET_ADMIN and wireguard-go.",
            show_default=False,
        ),
    ] = None,
    siderolink_prefix: Annotated[
        str,
        typer.Option("--siderolink-prefix", help="The tunnel's IPv6 prefix; herder takes its first address."),
    ] = "fdae:41e4:649b:9303::/64",
    siderolink_interface: Annotated[
        str, typer.Option("--siderolink-interface", help="The name of herder's WireGuard interface.")
    ] = "siderolink",
    siderolink_peer_timeout: Annotated[
        float,
        typer.Option(
            "--siderolink-peer-timeout",
            min=1,
            help="Seconds without a packet from a joined machine before its tunnel is reported down.",
        ),
    ] = 90.0,
    siderolink_tls_cert: Annotated[
        Path | None,
        typer.Option(
            "--siderolink-tls-cert",
            help="Serve the Provision API over TLS with this certificate (PEM, its chain after it): one the "
            "machines trust (Talos checks it against its system roots), for siderolink.api=https://... "
            "Without it the Provision API is plaintext gRPC and the join token travels in the clear.",
            show_default=False,
        ),
    ] = None,
    siderolink_tls_key: Annotated[
        Path | None,
        typer.Option(
            "--siderolink-tls-key", help="The private key of --siderolink-tls-cert (PEM).", show_default=False
        ),
    ] = None,
    provider: Annotated[
        list[str] | None,
        typer.Option(
            "--provider",
            help="ID or ID=TYPE: run infra provider ID (an entry point of herder.providers, by default "
            "named as the id) inside the server, as its own ServiceAccount over loopback. Repeatable.",
            show_default=False,
        ),
    ] = None,
    oidc_issuer: OidcIssuerOption = None,
    oidc_client_id: OidcClientIdOption = None,
    oidc_client_secret_file: OidcClientSecretFileOption = None,
    oidc_cli_client_id: OidcCliClientIdOption = None,
    oidc_cli_client_secret: OidcCliClientSecretOption = None,
    oidc_scopes: OidcScopesOption = " ".join(DEFAULT_SCOPES),
    oidc_groups_claim: OidcGroupsClaimOption = "groups",
    oidc_default_role: OidcDefaultRoleOption = "None",
    oidc_allow_unverified_email: OidcUnverifiedEmailOption = False,
    oidc_ca_file: OidcCaFileOption = None,
    oidc_provider_name: OidcProviderNameOption = None,
    session_idle_timeout: SessionIdleOption = int(IDLE.total_seconds()),
    session_max_age: SessionMaxAgeOption = int(MAX_AGE.total_seconds()),
    shards: Annotated[
        int,
        typer.Option(
            "--shards",
            min=1,
            max=256,
            help="Split the controllers' work into this many shards, shared by the replicas on one etcd: "
            "the clusters hashed onto all but one, objects of no cluster on that one. 1: the elected "
            "leader runs every controller.",
        ),
    ] = 1,
) -> None:
    """Run herder's API server (HTTPS) and its Talos API gateway; on first start it writes
    DATA_DIR/admin.kubeconfig."""
    from herder.api.serve import ServeOptions

    if shards > 1 and not (state or "").startswith("etcd://"):
        raise fail(
            f"--shards {shards}: shards are shared by replicas on one etcd (--state etcd://HOST:PORT); "
            "an embedded store has one process, which runs every controller"
        )

    options = ServeOptions(
        data_dir=data_dir or default_data_dir(),
        listen=listen,
        state=state,
        tls_cert=tls_cert,
        tls_key=tls_key,
        tls_ca=tls_ca,
        tls_sans=tuple(tls_san or ()),
        encryption_key_file=encryption_key_file,
        audit_retention=Retention(timedelta(days=audit_max_age_days), audit_max_events),
        max_body_bytes=max_body_bytes,
        support_token_file=support_token_file,
        oidc=oidc_settings(
            oidc_issuer,
            oidc_client_id,
            oidc_client_secret_file,
            oidc_cli_client_id,
            oidc_cli_client_secret,
            oidc_scopes,
            oidc_groups_claim,
            oidc_default_role,
            oidc_allow_unverified_email,
            oidc_ca_file,
            oidc_provider_name,
        ),
        session_idle=timedelta(seconds=session_idle_timeout),
        session_max_age=timedelta(seconds=session_max_age),
    )
    join = _siderolink(
        siderolink_listen,
        siderolink_wireguard,
        siderolink_prefix,
        siderolink_interface,
        siderolink_peer_timeout,
        siderolink_tls_cert,
        siderolink_tls_key,
    )
    controller_options = replace(
        _controller_options(cluster_endpoints, options.data_dir, listen, spare_keys),
        managed_control_planes=managed_control_planes,
        managed_replace_after=managed_replace_after,
        manifest_resync=manifest_resync,
        backup_policy=_managed_backups(managed_backups),
    )
    if join is not None:
        controller_options = replace(
            controller_options, siderolink_api=join.api_url, siderolink_server=str(join.server.ip)
        )
    _run(
        options,
        controller_options,
        background=providers(options.data_dir, provider or []),
        talos_listen=talos_listen,
        machine_log_bytes=machine_log_bytes,
        services=[join.service(options.data_dir)] if join is not None else [],
        shards=shards,
    )


def _siderolink(
    listen: str | None,
    wireguard: str | None,
    prefix: str,
    interface: str,
    peer_timeout: float,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
) -> SideroLinkFlags | None:
    """What ``--siderolink-*`` ask for, checked (None: no SideroLink)."""
    if listen is None and wireguard is None:
        if tls_cert is not None or tls_key is not None:
            raise fail("--siderolink-tls-cert and --siderolink-tls-key need --siderolink-listen")
        return None
    if listen is None or wireguard is None:
        raise fail("--siderolink-listen and --siderolink-wireguard go together: give both, or neither")
    from herder.api.serve import parse_listen
    from herder.siderolink.addresses import parse_prefix, server_address
    from herder.siderolink.server import ProvisionTls, SideroLinkOptions

    try:
        options = SideroLinkOptions(
            listen=parse_listen(listen, "--siderolink-listen"),
            wireguard=parse_listen(wireguard, "--siderolink-wireguard"),
            prefix=parse_prefix(prefix),
            interface=interface,
            peer_timeout=peer_timeout,
            tls=ProvisionTls.read(tls_cert, tls_key),
        )
    except ValueError as exc:
        raise fail(str(exc)) from None
    if not 0 < len(interface) <= 15:
        raise fail(f"--siderolink-interface {interface!r}: 1 to 15 characters")
    check_free(listen, "SideroLink's Provision API", "--siderolink-listen")
    return SideroLinkFlags(options, server_address(options.prefix))


@dataclass(frozen=True)
class SideroLinkFlags:
    options: SideroLinkOptions
    server: IPv6Interface

    @property
    def api_url(self) -> str:
        """``siderolink.api`` without its token: ``https://`` where the Provision API serves TLS, else
        ``grpc://`` (plaintext), as Talos dials them."""
        host, port = self.options.listen
        scheme = "https" if self.options.tls is not None else "grpc"
        return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"

    def service(self, data_dir: Path) -> LoggingService:
        from herder.siderolink.server import SideroLinkServer

        return lambda logs: lambda store, audit: SideroLinkServer(store, audit, data_dir, self.options, logs)


def providers(data_dir: Path, flags: list[str]) -> list[BackgroundFactory]:
    """The infra providers ``--provider`` runs inside the server."""
    from herder.cli.infraproviders import InServerProvider, parse_provider_flag

    def factory(provider_id: str, provider_type: str) -> BackgroundFactory:
        return lambda store: InServerProvider(store, data_dir / KUBECONFIG, provider_id, provider_type)

    return [factory(*parse_provider_flag(flag)) for flag in flags]


def _managed_backups(flag: str) -> BackupPolicy:
    from pydantic import ValidationError

    from herder.controllers.backups.policy import managed_policy
    from herder.resources.backups import ClusterBackups

    interval, _, rest = flag.partition(":")
    retention, _, store = rest.partition(":")
    fields: dict[str, object] = {"interval": interval}
    try:
        if retention:
            if not retention.isdigit():
                raise ValueError(f"retention {retention!r} is not a whole number")
            fields["retention"] = int(retention)
        if store:
            fields["store"] = store
        schedule = ClusterBackups.model_validate(fields)
    except (ValueError, ValidationError) as exc:
        reason = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        raise fail(f"--managed-backups {flag!r}: expected INTERVAL:RETENTION[:STORE] ({reason})") from None
    return managed_policy(schedule)


def _controller_options(
    cluster_endpoints: str | None, data_dir: Path, listen: str, spare_keys: int | None = None
) -> ControllerOptions:
    from herder.api.serve import host_port, parse_listen, server_url
    from herder.controllers.catalog import ControllerOptions
    from herder.controllers.clusters.load_balancer import EndpointRange

    try:
        host, port = parse_listen(listen)
        api_url = server_url(host, port)
        # By default the balancers listen where the API does (a wildcard address is reached through
        # loopback, as the API is), on ports below the system's ephemeral ones.
        loopback = host_port(host, port).rpartition(":")[0]
        endpoints = EndpointRange.parse(cluster_endpoints or f"{loopback}:{DEFAULT_ENDPOINT_PORTS}")
    except ValueError as exc:
        raise fail(str(exc)) from None
    options = ControllerOptions(
        cluster_endpoints=endpoints, backups_dir=(data_dir / "backups").resolve(), api_url=api_url
    )
    if spare_keys is not None:
        options = replace(options, spare_keys=spare_keys, spare_keys_now=True)
    return options


def _demo_objects(emulator: str) -> list[Resource]:
    registry = herder_registry()
    patch = registry.get("ConfigPatch")

    def config_patch(name: str, data: str, description: str, **meta: object) -> Resource:
        return Resource.model_validate(
            {
                "apiVersion": patch.api_version,
                "kind": patch.kind,
                "metadata": {"name": name, "namespace": "default", **meta},
                "spec": {"data": data, "description": description},
            }
        )

    def demo_object(kind: str, name: str, spec: dict[str, object], **meta: object) -> Resource:
        info = registry.get(kind)
        return Resource.model_validate(
            {
                "apiVersion": info.api_version,
                "kind": info.kind,
                "metadata": {"name": name, "namespace": "default", **meta},
                "spec": spec,
            }
        )

    in_demo = {"labels": {"herder.dev/cluster": "demo"}}
    provider = Resource.model_validate(
        {
            "apiVersion": "herder.dev/v1alpha1",
            "kind": "InfraProvider",
            "metadata": {"name": DEMO_PROVIDER},
            "spec": {"displayName": "the demo's emulator", "config": {"emulator": emulator}},
        }
    )
    return [
        # The demo cluster: its control planes on the emulator's registered machines, its workers made on
        # demand by the emulator's infra provider (which the demo runs inside the server).
        provider,
        demo_object("Cluster", "demo", {"talosVersion": "v1.13.9", "kubernetesVersion": "1.33.0"}),
        demo_object("MachineClass", "emulated", {"selector": {}, "description": "the emulator's machines"}),
        demo_object(
            "MachineClass",
            "on-demand",
            {
                "autoProvision": {
                    "providerID": DEMO_PROVIDER,
                    "providerData": {"cpus": 2, "memoryMiB": 4096},
                },
                "description": "machines the emulator's provider makes",
            },
        ),
        demo_object(
            "MachineSet",
            "demo-control-planes",
            {"role": "controlplane", "machineClass": {"name": "emulated", "size": 3}},
            **in_demo,
        ),
        demo_object(
            "MachineSet",
            "demo-workers",
            {"role": "worker", "machineClass": {"name": "on-demand", "size": 2}},
            **in_demo,
        ),
        config_patch(
            "ntp",
            "machine:\n  time:\n    servers: [time.cloudflare.com]\n",
            "time servers for every machine",
            labels={"herder.dev/cluster": "demo"},
        ),
        config_patch(
            "herder-kubespan",
            "machine:\n  network:\n    kubespan:\n      enabled: true\n",
            "managed control planes run KubeSpan (a system patch: hidden below Support)",
            labels={"herder.dev/cluster": "demo", "herder.dev/hidden": "true"},
        ),
        config_patch(
            "audit-policy",
            "cluster:\n  apiServer:\n    auditPolicy: {}\n",
            "set by the platform: read-only",
            labels={"herder.dev/cluster": "demo"},
            annotations={"herder.dev/read-only": "true"},
        ),
    ]


async def _seed_demo(data_dir: Path, store: Store, emulator: str) -> None:
    from herder.api import tokens

    for obj in [*_demo_objects(emulator), _viewer()]:
        with contextlib.suppress(AlreadyExists):
            await store.create(obj, actor=SYSTEM)
    from herder.api.serve import UI_PATH

    admin = data_dir / KUBECONFIG
    viewer = data_dir / "viewer.kubeconfig"
    credentials = load(admin)
    issued = await tokens.issue(store, SERVICE_ACCOUNT, "viewer", description="herder demo")
    write_kubeconfig(viewer, credentials.server, credentials.ca_pem, issued.token, user="viewer")
    print(
        "\nherder demo is running.\n"
        f"Web UI: {credentials.server}{UI_PATH}  (sign in with the token in {admin}, or {viewer}'s as a\n"
        "Reader; the browser must trust the CA in the kubeconfig, or be told to accept the certificate)\n"
        "Try:\n"
        f"  kubectl --kubeconfig {admin} get configpatches\n"
        f"  kubectl --kubeconfig {admin} api-resources\n"
        f"  kubectl --kubeconfig {admin} get auditevents\n"
        f"  kubectl --kubeconfig {admin} get etcdbackups    # of Clusters with spec.backups: {{interval: 1h}};\n"
        "      herder cluster backup NAME takes one now, a MachineSet's bootstrapSpec restores one\n"
        f"  kubectl --kubeconfig {viewer} delete configpatch ntp    # a Reader: forbidden\n"
        f"  herder get cp --kubeconfig {admin}    (or export HERDER_KUBECONFIG={admin})\n"
        "The Talos emulator runs beside it; herder forms the demo cluster (3 control planes, 2 workers) on\n"
        "its machines. Watch it come up, then use it:\n"
        f"  kubectl --kubeconfig {admin} get clusters,machinesets,machines -w     # Ctrl+C ends the watch\n"
        f"  kubectl --kubeconfig {admin} get infraproviders,machinerequests     # the workers, made on demand\n"
        f"  kubectl --kubeconfig {admin} wait --for=condition=Ready cluster/demo --timeout=5m\n"
        f"  kubectl --kubeconfig {admin} describe cluster demo\n"
        f"  herder cluster kubeconfig demo -o {data_dir / 'demo.kubeconfig'} --kubeconfig {admin}\n"
        f"  kubectl --kubeconfig {data_dir / 'demo.kubeconfig'} get nodes,pods -A\n"
        f"  herder cluster talosconfig demo -o {data_dir / 'demo.talosconfig'} --kubeconfig {admin}\n"
        f"  herder talos --talosconfig {data_dir / 'demo.talosconfig'} -n NODE services    # through herder\n"
        f"  herder emu machines --data-dir {data_dir / 'emulator'}\n"
        "Stop it with Ctrl+C.\n",
        flush=True,
    )


def _viewer() -> Resource:
    return Resource.model_validate(
        {
            "apiVersion": SERVICE_ACCOUNT.api_version,
            "kind": SERVICE_ACCOUNT.kind,
            "metadata": {"name": "viewer"},
            "spec": {"role": "Reader", "description": "the demo's read-only account"},
        }
    )


def demo(
    data_dir: DataDirOption = None,
    listen: ListenOption = DEFAULT_LISTEN,
    cluster_endpoints: ClusterEndpointsOption = DEMO_ENDPOINTS,
    talos_listen: TalosListenOption = None,
    emulator_listen: Annotated[
        str, typer.Option("--emulator-listen", help="HOST:PORT of the emulator's control API.")
    ] = DEMO_EMULATOR,
    machine_cidr: Annotated[
        str,
        typer.Option(
            "--machine-cidr", help="Loopback network the emulated machines get their addresses from."
        ),
    ] = DEFAULT_MACHINE_CIDR,
) -> None:
    """Run herder with demo objects in ./.herder-demo, the Talos emulator beside it with a demo
    cluster, and print how to use kubectl against both."""
    # Every address the demo listens on is checked before the server and the emulator load.
    check_free(listen, "herder's API", "--listen")
    check_free(talos_listen or _next_port(listen), "the Talos API gateway", "--talos-listen")
    check_free(emulator_listen, "the emulator's control API", "--emulator-listen")
    from herder.api.serve import ServeOptions, parse_listen
    from herder.emu.control.demo import DemoEmulator

    where = data_dir or DEMO_DIR
    try:
        emulator_address = parse_listen(emulator_listen, "--emulator-listen")
    except ValueError as exc:
        raise fail(str(exc)) from None
    emulator = DemoEmulator(where, where / KUBECONFIG, listen=emulator_address, machine_cidr=machine_cidr)
    emulator_url = f"http://{emulator_listen}"

    async def ready(store: Store) -> None:
        await _seed_demo(where, store, emulator_url)
        await emulator.register()

    _run(
        ServeOptions(data_dir=where, listen=listen),
        _controller_options(cluster_endpoints, where, listen),
        ready,
        providers(where, [f"{DEMO_PROVIDER}=emulator"]),
        talos_listen=talos_listen,
        around=emulator.running,
    )
