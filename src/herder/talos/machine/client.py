"""The async client of the Talos machine API (``machine.MachineService``) and of its resource API (COSI's
``cosi.resource.State``, what ``talosctl get`` reads), as talosctl uses them.

One client talks to one endpoint (a machine's apid) and can aim each call at another machine of the same
cluster with the ``node`` gRPC metadata, which apid proxies. It is built from a talosconfig (mutual TLS
with the cluster's Talos CA) or insecure, for machines in maintenance mode. Calls have a timeout; only
idempotent ones are retried, and only when the machine could not be reached.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import ssl
import tarfile
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf import duration_pb2, empty_pb2

import herder.talos.machine.resources as res
import herder.talos.machine.tls as machine_tls
from herder.talos.api.common import common_pb2
from herder.talos.api.cosi import state_pb2, state_pb2_grpc
from herder.talos.api.machine import machine_pb2 as pb
from herder.talos.api.machine import machine_pb2_grpc as pb_grpc
from herder.talos.machine import connections as shared
from herder.talos.machine.connections import Connection
from herder.talos.machine.errors import (
    InvalidArgument,
    MachineAPIError,
    NotFound,
    Unauthenticated,
    Unavailable,
    from_status,
)
from herder.talos.machine.tunnel import ClientTunnel, RefusedAfterHandshake
from herder.talos.machine.types import (
    ApplyMode,
    ApplyResult,
    ConfigValidationErrorEvent,
    EtcdMember,
    EtcdMemberStatus,
    MachineEvent,
    MachineStage,
    MachineStatus,
    Payload,
    PhaseEvent,
    RebootMode,
    SequenceEvent,
    ServiceStateEvent,
    ServiceStatus,
    TaskEvent,
    UnmetCondition,
    UpgradeResult,
    VersionInfo,
    WipeMode,
)
from herder.talos.talosconfig import Talosconfig, TalosconfigError

DEFAULT_PORT = 50000
"""apid's port."""

EVENT_TYPE_PREFIX = "talos/runtime/"

SNAPSHOT_CHUNK = 1 << 20

_T = TypeVar("_T")


RUNNING_CONFIG_PATH = "/system/state/config.yaml"


@dataclass(frozen=True)
class _Stubs:
    """The services of one connection to apid."""

    machine: pb_grpc.MachineServiceStub
    state: state_pb2_grpc.StateStub


def _stubs(channel: grpc.aio.Channel) -> _Stubs:
    return _Stubs(
        pb_grpc.MachineServiceStub(channel),  # type: ignore[no-untyped-call]
        state_pb2_grpc.StateStub(channel),  # type: ignore[no-untyped-call]
    )


_Metadata = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Credentials:
    """Mutual TLS material (PEM): the Talos CA to trust, and the client certificate and key to present."""

    ca: bytes
    crt: bytes
    key: bytes


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """``host``, ``host:port`` or ``[v6]:port`` → (host, port), apid's port by default."""
    text = endpoint.strip()
    for scheme in ("https://", "tcp://"):
        text = text.removeprefix(scheme)
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
        return host, int(port) if port else DEFAULT_PORT
    if text.count(":") == 1:
        host, port = text.split(":")
        return host, int(port)
    return text, DEFAULT_PORT


class MachineClient:
    """A client of one machine API endpoint. Use ``async with``, or ``close()`` when done."""

    def __init__(
        self,
        endpoint: str,
        *,
        credentials: Credentials | None = None,
        node: str | None = None,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        retries: int = 3,
        retry_backoff: float = 0.2,
    ) -> None:
        """``credentials=None`` is ``--insecure``: encrypted, unverified, no client certificate."""
        self.endpoint = endpoint
        self.node = node
        self.timeout = timeout
        self.retries = retries
        self.retry_backoff = retry_backoff
        self._host, self._port = split_endpoint(endpoint)
        self._connect_timeout = connect_timeout
        self._credentials = credentials
        # The connection this client holds of those the process shares (``connections``), while open.
        self._connection: Connection | None = None
        self._key: shared.Key = (
            f"{self._host}:{self._port}",
            credentials.crt if credentials is not None else b"",
            credentials.ca if credentials is not None else b"",
        )
        self._lock = asyncio.Lock()

    @classmethod
    def from_talosconfig(
        cls,
        config: Talosconfig,
        *,
        endpoint: str | None = None,
        node: str | None = None,
        context: str | None = None,
        **options: Any,
    ) -> MachineClient:
        """A client of the context's first endpoint (or ``endpoint``), targeting ``node`` or its first node."""
        ctx = config.contexts.get(context) if context else config.current()
        if ctx is None:
            raise TalosconfigError(f"talosconfig: context {context!r} is not defined")
        target = endpoint or (ctx.endpoints[0] if ctx.endpoints else None)
        if not target:
            raise TalosconfigError("talosconfig: no endpoint given and the context has none")
        if not (ctx.ca and ctx.crt and ctx.key):
            raise TalosconfigError("talosconfig: the context has no CA, client certificate or key")
        default_node = node if node is not None else (ctx.nodes[0] if ctx.nodes else None)
        return cls(target, credentials=Credentials(ctx.ca, ctx.crt, ctx.key), node=default_node, **options)

    @classmethod
    def insecure(cls, endpoint: str, *, node: str | None = None, **options: Any) -> MachineClient:
        """A client for maintenance mode (``talosctl --insecure``)."""
        return cls(endpoint, credentials=None, node=node, **options)

    @property
    def is_insecure(self) -> bool:
        return self._credentials is None

    async def __aenter__(self) -> MachineClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await shared.of_this_loop().give_back(self._key, connection)

    @property
    def _tunnel(self) -> ClientTunnel | None:
        return self._connection.tunnel if self._connection is not None else None

    async def _connect(self) -> _Stubs:
        async with self._lock:
            # A client keeps its connection until it is closed, retired or not: its streams run on it.
            if self._connection is None:
                self._connection = await shared.of_this_loop().take(self._key, self._open)
            stubs: _Stubs = self._connection.stubs
            return stubs

    def _unreachable(self) -> None:
        """The machine could not be reached over this client's connection: later clients open another."""
        if self._connection is not None:
            shared.of_this_loop().retire(self._key, self._connection)

    async def _open(self) -> Connection:
        creds = self._credentials
        options = [
            ("grpc.default_authority", f"{self._host}:{self._port}"),
            ("grpc.max_receive_message_length", 32 << 20),
            ("grpc.enable_retries", 0),
        ]
        if creds is not None and machine_tls.native(creds.ca, creds.crt, creds.key):
            # grpc's TLS can use these keys (a gateway's, not a Talos machine's Ed25519 ones): no
            # tunnel, nothing of the connection in Python.
            channel = grpc.aio.secure_channel(
                f"{self._host}:{self._port}",
                grpc.ssl_channel_credentials(creds.ca, creds.key, creds.crt),
                options=[*options, ("grpc.ssl_target_name_override", self._host)],
            )
            return Connection(channel, None, _stubs(channel))
        if creds is None:
            context: ssl.SSLContext = machine_tls.insecure_client_context()
        else:
            try:
                context = machine_tls.client_context(creds.ca, creds.crt, creds.key)
            except (ssl.SSLError, ValueError) as e:
                raise Unauthenticated(f"unusable Talos client credentials: {e}") from None
        tunnel = ClientTunnel(
            self._host,
            self._port,
            context,
            server_hostname=self._host if creds is not None else None,
            handshake_timeout=self._connect_timeout,
        )
        port = await tunnel.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options)
        return Connection(channel, tunnel, _stubs(channel))

    async def channel(self) -> grpc.aio.Channel:
        """The gRPC channel to the endpoint, for calls this client has no method for (a proxy relays raw
        messages over it); ``explain`` tells what a call's failure on it means."""
        await self._connect()
        assert self._connection is not None
        return self._connection.channel

    def explain(self, exc: grpc.aio.AioRpcError, *, node: str | None = None) -> MachineAPIError:
        """A failed call made on ``channel()``, as this client reports its own: a machine that refused the
        client's certificate, one that could not be reached (and why), or the machine's answer."""
        return self._error(exc, node)

    def _metadata(self, node: str | None) -> _Metadata:
        target = node if node is not None else self.node
        return (("node", target),) if target else ()

    def _error(self, exc: grpc.aio.AioRpcError, node: str | None) -> MachineAPIError:
        error = self._explained(exc, node)
        if isinstance(error, Unavailable):
            self._unreachable()
        return error

    def _explained(self, exc: grpc.aio.AioRpcError, node: str | None) -> MachineAPIError:
        target = node or self.node or self._host
        code = exc.code()
        details = exc.details() or ""
        if code == grpc.StatusCode.UNAVAILABLE and self._tunnel is None and _refused_by_tls(details):
            # grpc's own TLS (no tunnel) reports a server's alert only as a failed handshake or record.
            return Unauthenticated(
                f"TLS with {self._host}:{self._port} failed: the server refused the client certificate ({details})",
                node=target,
            )
        if code == grpc.StatusCode.UNAVAILABLE and self._tunnel is not None:
            cause = self._tunnel.last_error
            if isinstance(cause, ssl.SSLError):
                return Unauthenticated(
                    f"TLS with {self._host}:{self._port} failed: {cause.reason or cause}", node=target
                )
            if isinstance(cause, RefusedAfterHandshake):
                return Unauthenticated(f"{self._host}:{self._port}: {cause}", node=target)
            if cause is not None:
                return Unavailable(f"cannot reach {self._host}:{self._port}: {cause}", node=target)
        return from_status(code, exc.details() or "", node=target)

    async def _call(
        self,
        invoke: Callable[[_Stubs, _Metadata], Awaitable[_T]],
        *,
        idempotent: bool,
        node: str | None,
    ) -> _T:
        attempts = 1 + (self.retries if idempotent else 0)
        for attempt in range(attempts):
            stubs = await self._connect()
            try:
                return await invoke(stubs, self._metadata(node))
            except grpc.aio.AioRpcError as e:
                error = self._error(e, node)
                if isinstance(error, Unavailable) and attempt + 1 < attempts:
                    await asyncio.sleep(self.retry_backoff * 2**attempt)
                    continue
                raise error from None
        raise AssertionError("unreachable")

    def _first(self, messages: Any, node: str | None) -> Any:
        if not messages:
            raise MachineAPIError("empty reply", node=node or self.node or self._host)
        message = messages[0]
        if message.metadata.error:
            raise MachineAPIError(
                message.metadata.error, node=message.metadata.hostname or node or self.node or ""
            )
        return message

    async def _unary(self, method: str, request: Any, *, idempotent: bool, node: str | None) -> Any:
        timeout = self.timeout

        async def invoke(stubs: _Stubs, metadata: _Metadata) -> Any:
            return await getattr(stubs.machine, method)(request, metadata=metadata, timeout=timeout)

        reply = await self._call(invoke, idempotent=idempotent, node=node)
        return self._first(reply.messages, node)

    # --- calls ---

    async def version(self, *, node: str | None = None) -> VersionInfo:
        m = await self._unary("Version", empty_pb2.Empty(), idempotent=True, node=node)
        return VersionInfo(
            tag=m.version.tag,
            sha=m.version.sha,
            built=m.version.built,
            go_version=m.version.go_version,
            os=m.version.os,
            arch=m.version.arch,
            platform=m.platform.name,
            platform_mode=m.platform.mode,
            rbac=m.features.rbac,
            node=m.metadata.hostname or node or self.node or self._host,
        )

    async def apply_configuration(
        self,
        config: bytes | str,
        *,
        mode: ApplyMode = ApplyMode.AUTO,
        dry_run: bool = False,
        try_timeout: float | None = None,
        node: str | None = None,
    ) -> ApplyResult:
        data = config.encode() if isinstance(config, str) else config
        request = pb.ApplyConfigurationRequest(data=data, mode=mode.name, dry_run=dry_run)
        if try_timeout is not None:
            request.try_mode_timeout.CopyFrom(
                duration_pb2.Duration(seconds=int(try_timeout), nanos=int(try_timeout % 1 * 1e9))
            )
        m = await self._unary("ApplyConfiguration", request, idempotent=False, node=node)
        return ApplyResult(mode=ApplyMode(m.mode), details=m.mode_details, warnings=tuple(m.warnings))

    async def bootstrap(
        self, *, recover_etcd: bool = False, recover_skip_hash_check: bool = False, node: str | None = None
    ) -> None:
        request = pb.BootstrapRequest(
            recover_etcd=recover_etcd, recover_skip_hash_check=recover_skip_hash_check
        )
        await self._unary("Bootstrap", request, idempotent=False, node=node)

    async def upgrade(
        self,
        image: str,
        *,
        preserve: bool = False,
        stage: bool = False,
        force: bool = False,
        node: str | None = None,
    ) -> UpgradeResult:
        request = pb.UpgradeRequest(image=image, preserve=preserve, stage=stage, force=force)
        m = await self._unary("Upgrade", request, idempotent=False, node=node)
        return UpgradeResult(ack=m.ack, actor_id=m.actor_id)

    async def reboot(self, *, mode: RebootMode = RebootMode.DEFAULT, node: str | None = None) -> str:
        """Reboot; returns the actor id of the reboot sequence's events."""
        m = await self._unary("Reboot", pb.RebootRequest(mode=mode.name), idempotent=False, node=node)
        return str(m.actor_id)

    async def reset(
        self,
        *,
        graceful: bool = True,
        reboot: bool = False,
        wipe_mode: WipeMode = WipeMode.ALL,
        system_partitions: tuple[str, ...] = (),
        node: str | None = None,
    ) -> str:
        """Wipe the machine back to maintenance mode; returns the actor id."""
        request = pb.ResetRequest(
            graceful=graceful,
            reboot=reboot,
            mode=wipe_mode.name,
            system_partitions_to_wipe=[pb.ResetPartitionSpec(label=p, wipe=True) for p in system_partitions],
        )
        m = await self._unary("Reset", request, idempotent=False, node=node)
        return str(m.actor_id)

    async def shutdown(self, *, force: bool = False, node: str | None = None) -> str:
        m = await self._unary("Shutdown", pb.ShutdownRequest(force=force), idempotent=False, node=node)
        return str(m.actor_id)

    async def service_list(self, *, node: str | None = None) -> list[ServiceStatus]:
        m = await self._unary("ServiceList", empty_pb2.Empty(), idempotent=True, node=node)
        return [
            ServiceStatus(
                id=s.id,
                state=s.state,
                healthy=s.health.healthy,
                health_unknown=s.health.unknown,
                last_message=s.health.last_message,
            )
            for s in m.services
        ]

    async def etcd_status(self, *, node: str | None = None) -> EtcdMemberStatus:
        m = (await self._unary("EtcdStatus", empty_pb2.Empty(), idempotent=True, node=node)).member_status
        return EtcdMemberStatus(
            member_id=m.member_id,
            leader=m.leader,
            db_size=m.db_size,
            db_size_in_use=m.db_size_in_use,
            raft_index=m.raft_index,
            raft_term=m.raft_term,
            is_learner=m.is_learner,
            errors=tuple(m.errors),
        )

    async def etcd_member_list(
        self, *, query_local: bool = False, node: str | None = None
    ) -> list[EtcdMember]:
        request = pb.EtcdMemberListRequest(query_local=query_local)
        m = await self._unary("EtcdMemberList", request, idempotent=True, node=node)
        return [
            EtcdMember(
                id=x.id,
                hostname=x.hostname,
                peer_urls=tuple(x.peer_urls),
                client_urls=tuple(x.client_urls),
                is_learner=x.is_learner,
            )
            for x in m.members
        ]

    async def etcd_leave_cluster(self, *, node: str | None = None) -> None:
        await self._unary("EtcdLeaveCluster", pb.EtcdLeaveClusterRequest(), idempotent=False, node=node)

    async def etcd_forfeit_leadership(self, *, node: str | None = None) -> str:
        """Hand etcd leadership to another member; returns the member that led before (empty if not this one)."""
        request = pb.EtcdForfeitLeadershipRequest()
        m = await self._unary("EtcdForfeitLeadership", request, idempotent=False, node=node)
        return str(m.member)

    async def etcd_remove_member_by_id(self, member_id: int, *, node: str | None = None) -> None:
        request = pb.EtcdRemoveMemberByIDRequest(member_id=member_id)
        await self._unary("EtcdRemoveMemberByID", request, idempotent=False, node=node)

    async def _read_stream(self, method: str, request: Any, node: str | None) -> bytes:
        """A whole ``common.Data`` stream, retried from the start if the machine was unreachable."""
        timeout = self.timeout

        async def invoke(stubs: _Stubs, metadata: _Metadata) -> bytes:
            chunks = []
            async for message in getattr(stubs.machine, method)(request, metadata=metadata, timeout=timeout):
                self._first([message], node)
                chunks.append(message.bytes)
            return b"".join(chunks)

        return await self._call(invoke, idempotent=True, node=node)

    async def etcd_snapshot(self, *, node: str | None = None) -> bytes:
        """A snapshot of the etcd database of this control plane node."""
        return await self._read_stream("EtcdSnapshot", pb.EtcdSnapshotRequest(), node)

    async def etcd_recover(self, snapshot: bytes | AsyncIterable[bytes], *, node: str | None = None) -> None:
        """Upload a snapshot for a following ``bootstrap(recover_etcd=True)``."""
        timeout = self.timeout

        async def chunks() -> AsyncIterator[common_pb2.Data]:
            if isinstance(snapshot, bytes):
                for i in range(0, len(snapshot), SNAPSHOT_CHUNK):
                    yield common_pb2.Data(bytes=snapshot[i : i + SNAPSHOT_CHUNK])
            else:
                async for chunk in snapshot:
                    yield common_pb2.Data(bytes=chunk)

        async def invoke(stubs: _Stubs, metadata: _Metadata) -> Any:
            return await stubs.machine.EtcdRecover(chunks(), metadata=metadata, timeout=timeout)

        reply = await self._call(invoke, idempotent=False, node=node)
        self._first(reply.messages, node)

    async def kubeconfig(self, *, node: str | None = None) -> bytes:
        """The admin kubeconfig of the cluster, from a control plane node (unpacked from its tar.gz)."""
        archive = await self._read_stream("Kubeconfig", empty_pb2.Empty(), node)
        try:
            with tarfile.open(fileobj=io.BytesIO(gzip.decompress(archive)), mode="r:") as tar:
                member = tar.extractfile("kubeconfig")
                if member is None:
                    raise KeyError("kubeconfig")
                return member.read()
        except (OSError, tarfile.TarError, KeyError, EOFError) as e:
            raise MachineAPIError(
                f"malformed kubeconfig archive: {e}", node=node or self.node or ""
            ) from None

    async def events(
        self,
        *,
        tail_events: int = 0,
        tail_id: str = "",
        tail_seconds: int = 0,
        actor_id: str = "",
        node: str | None = None,
    ) -> AsyncIterator[MachineEvent]:
        """The machine's events: the requested backlog, then live ones until the caller stops iterating."""
        request = pb.EventsRequest(
            tail_events=tail_events, tail_id=tail_id, tail_seconds=tail_seconds, with_actor_id=actor_id
        )
        async for event in self._stream("Events", request, node):
            yield decode_event(event, node or self.node or "")

    # --- inside a machine: what talosctl reads (Talos's own messages) ---

    async def hostname(self, *, node: str | None = None) -> str:
        m = await self._unary("Hostname", empty_pb2.Empty(), idempotent=True, node=node)
        return str(m.hostname)

    async def memory(self, *, node: str | None = None) -> pb.MemInfo:
        """``/proc/meminfo`` (KiB)."""
        m = await self._unary("Memory", empty_pb2.Empty(), idempotent=True, node=node)
        return m.meminfo  # type: ignore[no-any-return]

    async def load_avg(self, *, node: str | None = None) -> pb.LoadAvg:
        return await self._unary("LoadAvg", empty_pb2.Empty(), idempotent=True, node=node)  # type: ignore[no-any-return]

    async def processes(self, *, node: str | None = None) -> list[pb.ProcessInfo]:
        m = await self._unary("Processes", empty_pb2.Empty(), idempotent=True, node=node)
        return list(m.processes)

    async def system_stat(self, *, node: str | None = None) -> pb.SystemStat:
        """``/proc/stat``: CPU seconds since boot, interrupts, context switches."""
        return await self._unary("SystemStat", empty_pb2.Empty(), idempotent=True, node=node)  # type: ignore[no-any-return]

    async def cpu_info(self, *, node: str | None = None) -> list[pb.CPUInfo]:
        m = await self._unary("CPUInfo", empty_pb2.Empty(), idempotent=True, node=node)
        return list(m.cpu_info)

    async def disk_stats(self, *, node: str | None = None) -> pb.DiskStats:
        return await self._unary("DiskStats", empty_pb2.Empty(), idempotent=True, node=node)  # type: ignore[no-any-return]

    async def network_device_stats(self, *, node: str | None = None) -> pb.NetworkDeviceStats:
        return await self._unary("NetworkDeviceStats", empty_pb2.Empty(), idempotent=True, node=node)  # type: ignore[no-any-return]

    async def mounts(self, *, node: str | None = None) -> list[pb.MountStat]:
        m = await self._unary("Mounts", empty_pb2.Empty(), idempotent=True, node=node)
        return list(m.stats)

    async def containers(
        self, *, kubernetes: bool = False, node: str | None = None
    ) -> list[pb.ContainerInfo]:
        """The system services' containers, or with ``kubernetes`` the CRI's (``talosctl containers -k``)."""
        request = pb.ContainersRequest(**_runtime(kubernetes))
        m = await self._unary("Containers", request, idempotent=True, node=node)
        return list(m.containers)

    async def stats(self, *, kubernetes: bool = False, node: str | None = None) -> list[pb.Stat]:
        request = pb.StatsRequest(**_runtime(kubernetes))
        m = await self._unary("Stats", request, idempotent=True, node=node)
        return list(m.stats)

    async def netstat(
        self, *, listening: bool = False, pids: bool = False, node: str | None = None
    ) -> list[pb.ConnectRecord]:
        request = pb.NetstatRequest(
            filter=pb.NetstatRequest.LISTENING if listening else pb.NetstatRequest.ALL,
            feature=pb.NetstatRequest.Feature(pid=pids),
        )
        m = await self._unary("Netstat", request, idempotent=True, node=node)
        return list(m.connectrecord)

    async def etcd_alarms(self, *, node: str | None = None) -> list[pb.EtcdMemberAlarm]:
        m = await self._unary("EtcdAlarmList", empty_pb2.Empty(), idempotent=True, node=node)
        return list(m.member_alarms)

    async def etcd_alarm_disarm(self, *, node: str | None = None) -> list[pb.EtcdMemberAlarm]:
        m = await self._unary("EtcdAlarmDisarm", empty_pb2.Empty(), idempotent=False, node=node)
        return list(m.member_alarms)

    async def etcd_defragment(self, *, node: str | None = None) -> None:
        await self._unary("EtcdDefragment", empty_pb2.Empty(), idempotent=False, node=node)

    async def restart(self, id: str, *, kubernetes: bool = False, node: str | None = None) -> None:
        """Restart a container (``talosctl restart ID``)."""
        request = pb.RestartRequest(id=id, **_runtime(kubernetes))
        await self._unary("Restart", request, idempotent=False, node=node)

    async def service(self, id: str, action: str, *, node: str | None = None) -> str:
        """``start``, ``stop`` or ``restart`` a service; returns what the machine says it did."""
        calls = {
            "start": ("ServiceStart", pb.ServiceStartRequest),
            "stop": ("ServiceStop", pb.ServiceStopRequest),
            "restart": ("ServiceRestart", pb.ServiceRestartRequest),
        }
        if action not in calls:
            raise ValueError(f"unknown service action {action!r}: expected start, stop or restart")
        method, request = calls[action]
        m = await self._unary(method, request(id=id), idempotent=False, node=node)
        return str(m.resp)

    async def _stream(self, method: str, request: Any, node: str | None) -> AsyncIterator[Any]:
        """The messages of a server stream as they come, until it ends or the caller stops iterating."""
        stubs = await self._connect()
        call = getattr(stubs.machine, method)(request, metadata=self._metadata(node))
        try:
            async for message in call:
                self._first([message], node)
                yield message
        except grpc.aio.AioRpcError as e:
            raise self._error(e, node) from None
        finally:
            call.cancel()

    async def read(self, path: str, *, node: str | None = None) -> AsyncIterator[bytes]:
        """A file's bytes as they stream (``talosctl read``)."""
        async for message in self._stream("Read", pb.ReadRequest(path=path), node):
            yield message.bytes

    async def running_config(self, *, node: str | None = None) -> bytes:
        """The config the machine runs, as Talos keeps it (``/system/state/config.yaml``; ``os:admin``)."""
        return b"".join([chunk async for chunk in self.read(RUNNING_CONFIG_PATH, node=node)])

    async def list_files(
        self, root: str = "/", *, recurse: bool = False, depth: int = 0, node: str | None = None
    ) -> list[pb.FileInfo]:
        """A directory's entries (``talosctl list``); with ``recurse``, ``depth`` levels (0: all)."""
        request = pb.ListRequest(root=root, recurse=recurse, recursion_depth=depth)
        return [m async for m in self._stream("List", request, node)]

    async def disk_usage(self, *paths: str, node: str | None = None) -> list[pb.DiskUsageInfo]:
        request = pb.DiskUsageRequest(paths=list(paths) or ["/"])
        return [m async for m in self._stream("DiskUsage", request, node)]

    async def logs(
        self,
        id: str,
        *,
        follow: bool = False,
        tail: int = -1,
        kubernetes: bool = False,
        node: str | None = None,
    ) -> AsyncIterator[bytes]:
        """A service's log (or with ``kubernetes`` a container's), as it streams: its last ``tail`` lines
        (-1: all), then with ``follow`` new ones until the caller stops."""
        request = pb.LogsRequest(id=id, follow=follow, tail_lines=tail, **_runtime(kubernetes))
        async for message in self._stream("Logs", request, node):
            yield message.bytes

    async def dmesg(
        self, *, follow: bool = False, tail: bool = False, node: str | None = None
    ) -> AsyncIterator[str]:
        """The kernel's messages, one per item; with ``tail`` only new ones (with ``follow``)."""
        async for message in self._stream("Dmesg", pb.DmesgRequest(follow=follow, tail=tail), node):
            yield message.bytes.decode("utf-8", "replace")

    # --- resources (cosi.resource.State) ---

    def _target(self, node: str | None) -> str:
        return node or self.node or self._host

    async def get_resource(
        self, namespace: str, type: str, id: str, *, node: str | None = None
    ) -> res.TalosResource:
        """One resource (``talosctl get TYPE ID``); ``NotFound`` if there is none."""
        request = state_pb2.GetRequest(namespace=namespace, type=type, id=id)
        timeout = self.timeout

        async def invoke(stubs: _Stubs, metadata: _Metadata) -> Any:
            return await stubs.state.Get(request, metadata=metadata, timeout=timeout)

        reply = await self._call(invoke, idempotent=True, node=node)
        return res.decode_resource(reply.resource, self._target(node))

    async def list_resources(
        self, namespace: str, type: str, *, node: str | None = None
    ) -> list[res.TalosResource]:
        """Every resource of a type in a namespace (``talosctl get TYPE``)."""
        request = state_pb2.ListRequest(namespace=namespace, type=type)
        timeout = self.timeout

        async def invoke(stubs: _Stubs, metadata: _Metadata) -> list[Any]:
            return [m async for m in stubs.state.List(request, metadata=metadata, timeout=timeout)]

        replies = await self._call(invoke, idempotent=True, node=node)
        return [res.decode_resource(m.resource, self._target(node)) for m in replies]

    async def watch_resources(
        self, namespace: str, type: str, id: str | None = None, *, node: str | None = None
    ) -> AsyncIterator[res.ResourceEvent]:
        """Changes of one resource, or of every resource of a type, until the caller stops iterating.

        Watching one resource starts with it as it is (CREATED, or DESTROYED when there is none); watching a
        type starts with every resource of it (CREATED each), then a BOOTSTRAPPED event. The watch is set
        up once the first event can be awaited."""
        stubs = await self._connect()
        request = state_pb2.WatchRequest(namespace=namespace, type=type, api_version=1)
        if id is None:
            request.options.bootstrap_contents = True
        else:
            request.id = id
        call = stubs.state.Watch(request, metadata=self._metadata(node))
        target = self._target(node)
        try:
            async for reply in call:
                for event in reply.event:
                    yield res.ResourceEvent(
                        type=res.ResourceEventType(event.event_type),
                        resource=res.decode_resource(event.resource, target)
                        if event.HasField("resource")
                        else None,
                        old=res.decode_resource(event.old, target) if event.HasField("old") else None,
                        error=event.error,
                    )
        except grpc.aio.AioRpcError as e:
            raise self._error(e, node) from None
        finally:
            call.cancel()

    async def resource_definitions(self, *, node: str | None = None) -> list[res.ResourceDefinitionSpec]:
        """The resource types the machine serves (``talosctl get rd``)."""
        items = await self.list_resources(res.META, res.RESOURCE_DEFINITION, node=node)
        return [item.typed(res.ResourceDefinitionSpec) for item in items]

    async def resolve_resource_type(
        self, name: str, *, node: str | None = None
    ) -> res.ResourceDefinitionSpec:
        """The definition of the type a name means (its type, id or an alias, any case), as talosctl
        resolves the TYPE of ``talosctl get``."""
        wanted = name.lower()
        matched = [d for d in await self.resource_definitions(node=node) if wanted in d.names()]
        if len(matched) > 1:
            types = ", ".join(d.type for d in matched)
            raise InvalidArgument(f"resource type {name!r} is ambiguous: {types}", node=self._target(node))
        if not matched:
            raise NotFound(f"resource {name!r} is not registered", node=self._target(node))
        return matched[0]

    async def _specs(self, kind: str, spec: type[res.S], node: str | None) -> list[res.S]:
        items = await self.list_resources(res.KINDS[kind].namespace, kind, node=node)
        return [item.typed(spec) for item in sorted(items, key=lambda r: r.metadata.id)]

    async def system_information(self, *, node: str | None = None) -> res.SystemInformationSpec:
        """The machine's SMBIOS system information: its UUID (the machine's identity), maker and model."""
        item = await self.get_resource(
            res.HARDWARE, res.SYSTEM_INFORMATION, res.SYSTEM_INFORMATION_ID, node=node
        )
        return item.typed(res.SystemInformationSpec)

    async def processors(self, *, node: str | None = None) -> list[res.ProcessorSpec]:
        return await self._specs(res.PROCESSOR, res.ProcessorSpec, node)

    async def memory_modules(self, *, node: str | None = None) -> list[res.MemoryModuleSpec]:
        return await self._specs(res.MEMORY_MODULE, res.MemoryModuleSpec, node)

    async def disks(self, *, node: str | None = None) -> list[res.DiskSpec]:
        return await self._specs(res.DISK, res.DiskSpec, node)

    async def node_addresses(self, id: str = "current", *, node: str | None = None) -> res.NodeAddressSpec:
        """One of the machine's address sets (``res.NODE_ADDRESS_IDS``)."""
        item = await self.get_resource(res.NETWORK, res.NODE_ADDRESS, id, node=node)
        return item.typed(res.NodeAddressSpec)

    async def hostname_status(self, *, node: str | None = None) -> res.HostnameStatusSpec:
        """The machine's hostname (and domain name), as its HostnameStatus resource says."""
        item = await self.get_resource(res.NETWORK, res.HOSTNAME_STATUS, res.HOSTNAME_STATUS_ID, node=node)
        return item.typed(res.HostnameStatusSpec)

    async def machine_status(self, *, node: str | None = None) -> MachineStatus:
        """The machine's stage and readiness, as its MachineStatus resource says."""
        item = await self.get_resource(res.RUNTIME, res.MACHINE_STATUS, res.MACHINE_STATUS_ID, node=node)
        spec = item.typed(res.MachineStatusSpec)
        return MachineStatus(
            stage=spec.machine_stage,
            ready=spec.status.ready,
            unmet_conditions=tuple(UnmetCondition(c.name, c.reason) for c in spec.status.unmet_conditions),
        )


def _refused_by_tls(details: str) -> bool:
    """Whether grpc's report of a failed connection says the TLS handshake was refused (an alert)."""
    lowered = details.lower()
    return any(word in lowered for word in ("alert", "certificate", "handshake", "unwrap failed"))


def _runtime(kubernetes: bool) -> dict[str, Any]:
    """The namespace and driver of a containers call: the CRI's (Kubernetes) or containerd's system one."""
    if kubernetes:
        return {"namespace": "k8s.io", "driver": common_pb2.CRI}
    return {"namespace": "system", "driver": common_pb2.CONTAINERD}


def _action(enum_type: Any, value: int) -> str:
    return str(enum_type.Name(value))


def decode_event(event: pb.Event, node: str = "") -> MachineEvent:
    """A typed ``MachineEvent`` from the wire form (``Any`` payload with a ``talos/runtime/`` type URL)."""
    type_url = event.data.type_url
    name = type_url.removeprefix(EVENT_TYPE_PREFIX)
    payload: Payload = None
    decoders: dict[str, Callable[[bytes], Payload]] = {
        "machine.MachineStatusEvent": _machine_status,
        "machine.SequenceEvent": _sequence,
        "machine.PhaseEvent": _phase,
        "machine.TaskEvent": _task,
        "machine.ServiceStateEvent": _service_state,
        "machine.ConfigValidationErrorEvent": _config_validation_error,
    }
    decoder = decoders.get(name)
    if decoder is not None:
        payload = decoder(event.data.value)
    return MachineEvent(
        id=event.id,
        type_url=type_url,
        payload=payload,
        actor_id=event.actor_id,
        node=event.metadata.hostname or node,
    )


def _machine_status(raw: bytes) -> Payload:
    m = pb.MachineStatusEvent.FromString(raw)
    return MachineStatus(
        stage=MachineStage(m.stage),
        ready=m.status.ready,
        unmet_conditions=tuple(UnmetCondition(c.name, c.reason) for c in m.status.unmet_conditions),
    )


def _sequence(raw: bytes) -> Payload:
    m = pb.SequenceEvent.FromString(raw)
    return SequenceEvent(
        sequence=m.sequence,
        action=_action(pb.SequenceEvent.Action, m.action),
        error=m.error.message if m.HasField("error") else "",
    )


def _phase(raw: bytes) -> Payload:
    m = pb.PhaseEvent.FromString(raw)
    return PhaseEvent(phase=m.phase, action=_action(pb.PhaseEvent.Action, m.action))


def _task(raw: bytes) -> Payload:
    m = pb.TaskEvent.FromString(raw)
    return TaskEvent(task=m.task, action=_action(pb.TaskEvent.Action, m.action))


def _service_state(raw: bytes) -> Payload:
    m = pb.ServiceStateEvent.FromString(raw)
    return ServiceStateEvent(
        service=m.service,
        action=_action(pb.ServiceStateEvent.Action, m.action),
        message=m.message,
        healthy=m.health.healthy,
    )


def _config_validation_error(raw: bytes) -> Payload:
    return ConfigValidationErrorEvent(error=pb.ConfigValidationErrorEvent.FromString(raw).error)
