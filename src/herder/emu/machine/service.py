"""The gRPC ``machine.MachineService`` of every emulated machine, served by one internal server.

Each call is attributed to the machine the caller dialled and the roles of the caller's certificate (see
``network``), authorized as machined does, then routed as apid does: to that machine, to the one named by
the ``node`` metadata (one-to-one, errors as gRPC statuses), or to each of ``nodes`` (one-to-many, errors
in each message's metadata).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol, TypeAlias, TypeVar

import grpc
from google.protobuf import empty_pb2

from herder.emu.errors import ApiError, not_authorized
from herder.emu.machine.machine import Machine
from herder.emu.machine.network import Network, Peer
from herder.talos.api.common import common_pb2
from herder.talos.api.machine import machine_pb2 as pb
from herder.talos.api.machine import machine_pb2_grpc as pb_grpc
from herder.talos.machine import roles

CHUNK = 1 << 20

_R = TypeVar("_R")

Route: TypeAlias = Machine | ApiError

_Context = Any  # grpc.aio.ServicerContext (grpc ships no type information)


class Fleet(Protocol):
    """The machines the service answers for (the emulator provides them)."""

    @property
    def network(self) -> Network: ...

    @property
    def machines(self) -> Mapping[str, Machine]: ...

    def find(self, ref: str) -> Machine | None:
        """A machine by uuid, address, endpoint or hostname."""
        ...


class MachineService(pb_grpc.MachineServiceServicer):
    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    # --- who is calling, and where to ---

    async def _caller(self, method: str, context: _Context) -> tuple[Peer, Machine]:
        peer = self.fleet.network.peers.get(context.peer())
        machine = self.fleet.machines.get(peer.machine) if peer is not None else None
        if peer is None or machine is None:
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED, "call did not come through a machine's API endpoint"
            )
            raise AssertionError("unreachable")
        if not self.fleet.network.serving(machine.uuid):
            # A connection still open while its machine reboots or powers off: nothing answers any more.
            await context.abort(grpc.StatusCode.UNAVAILABLE, "connection closed: the machine is down")
        if machine.api_secure and not peer.authenticated:
            # A connection of the maintenance service, still open while apid restarts with mutual TLS.
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the maintenance service is shutting down")
        if not roles.allowed(method, peer.roles):
            error = not_authorized()
            await context.abort(error.code, error.message)
        return peer, machine

    async def _targets(self, entry: Machine, context: _Context) -> tuple[list[tuple[str, Route]], bool]:
        """The machines a call goes to, each with the name the caller used (or why it cannot be reached),
        and whether replies are aggregated (``nodes``) rather than one-to-one (``node`` or none)."""
        metadata = context.invocation_metadata() or ()
        node = [str(v) for k, v in metadata if k == "node"]
        nodes = [n.strip() for k, v in metadata if k == "nodes" for n in str(v).split(",") if n.strip()]
        if any(k == "proxyfrom" for k, _v in metadata):
            return [(entry.address, entry)], False
        if len(node) > 1:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "node metadata must be single-valued")
        if nodes and not (len(nodes) == 1 and entry.answers_to(nodes[0])):
            return [(n, self._route(entry, n)) for n in nodes], True
        if node and not entry.answers_to(node[0]):
            return [(node[0], self._route(entry, node[0]))], False
        return [(entry.address, entry)], False

    def _route(self, entry: Machine, target: str) -> Route:
        """The machine apid would proxy to, or the error it would get: only members of the entry machine's
        cluster accept its certificate."""
        if entry.in_maintenance:
            return ApiError(
                grpc.StatusCode.PERMISSION_DENIED, "node routing is not available in maintenance mode"
            )
        machine = self.fleet.find(target)
        network = self.fleet.network
        if machine is None or not network.serving(machine.uuid) or network.is_partitioned(machine.uuid):
            return ApiError(grpc.StatusCode.UNAVAILABLE, f"connection error: {target}: no route to host")
        same_cluster = (
            machine.config is not None
            and entry.config is not None
            and machine.config.os_ca.crt == entry.config.os_ca.crt
            and machine.api_secure
        )
        if not same_cluster:
            return ApiError(
                grpc.StatusCode.UNAVAILABLE, f"connection error: {target}: authentication handshake failed"
            )
        return machine

    async def _unary(
        self,
        method: str,
        context: _Context,
        handler: Callable[[Machine, Peer], Any],
        message: Callable[..., Any],
        reply: Callable[..., _R],
    ) -> _R:
        peer, entry = await self._caller(method, context)
        targets, aggregate = await self._targets(entry, context)
        messages = []
        for name, target in targets:
            try:
                if isinstance(target, ApiError):
                    raise target
                result = handler(target, peer)
            except ApiError as e:
                if not aggregate:
                    await context.abort(e.code, e.message)
                messages.append(message(metadata=common_pb2.Metadata(hostname=name, error=e.message)))
                continue
            if aggregate:
                result.metadata.hostname = name
            messages.append(result)
        return reply(messages=messages)

    async def _single(self, method: str, context: _Context) -> tuple[Peer, Machine]:
        peer, entry = await self._caller(method, context)
        targets, aggregate = await self._targets(entry, context)
        if aggregate and len(targets) > 1:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{method} streams from one node at a time")
        target = targets[0][1]
        if isinstance(target, ApiError):
            await context.abort(target.code, target.message)
            raise AssertionError("unreachable")
        return peer, target

    async def _abort(self, context: _Context, error: ApiError) -> None:
        await context.abort(error.code, error.message)

    # --- unary calls ---

    async def Version(self, request: empty_pb2.Empty, context: _Context) -> pb.VersionResponse:
        return await self._unary(
            "Version", context, lambda m, _p: m.version(), pb.Version, pb.VersionResponse
        )

    async def ApplyConfiguration(
        self, request: pb.ApplyConfigurationRequest, context: _Context
    ) -> pb.ApplyConfigurationResponse:
        return await self._unary(
            "ApplyConfiguration",
            context,
            lambda m, p: m.apply_configuration(request, p.roles),
            pb.ApplyConfiguration,
            pb.ApplyConfigurationResponse,
        )

    async def Bootstrap(self, request: pb.BootstrapRequest, context: _Context) -> pb.BootstrapResponse:
        def bootstrap(machine: Machine, _peer: Peer) -> pb.Bootstrap:
            machine.bootstrap(request)
            return pb.Bootstrap()

        return await self._unary("Bootstrap", context, bootstrap, pb.Bootstrap, pb.BootstrapResponse)

    async def Upgrade(self, request: pb.UpgradeRequest, context: _Context) -> pb.UpgradeResponse:
        def upgrade(machine: Machine, _peer: Peer) -> pb.Upgrade:
            return pb.Upgrade(ack="Upgrade request received", actor_id=machine.upgrade(request))

        return await self._unary("Upgrade", context, upgrade, pb.Upgrade, pb.UpgradeResponse)

    async def Reboot(self, request: pb.RebootRequest, context: _Context) -> pb.RebootResponse:
        return await self._unary(
            "Reboot", context, lambda m, _p: pb.Reboot(actor_id=m.reboot()), pb.Reboot, pb.RebootResponse
        )

    async def Reset(self, request: pb.ResetRequest, context: _Context) -> pb.ResetResponse:
        return await self._unary(
            "Reset", context, lambda m, _p: pb.Reset(actor_id=m.reset(request)), pb.Reset, pb.ResetResponse
        )

    async def Shutdown(self, request: pb.ShutdownRequest, context: _Context) -> pb.ShutdownResponse:
        return await self._unary(
            "Shutdown",
            context,
            lambda m, _p: pb.Shutdown(actor_id=m.shutdown()),
            pb.Shutdown,
            pb.ShutdownResponse,
        )

    async def ServiceList(self, request: empty_pb2.Empty, context: _Context) -> pb.ServiceListResponse:
        return await self._unary(
            "ServiceList",
            context,
            lambda m, _p: pb.ServiceList(services=m.services()),
            pb.ServiceList,
            pb.ServiceListResponse,
        )

    async def EtcdMemberList(
        self, request: pb.EtcdMemberListRequest, context: _Context
    ) -> pb.EtcdMemberListResponse:
        return await self._unary(
            "EtcdMemberList",
            context,
            lambda m, _p: pb.EtcdMembers(members=m.etcd_members()),
            pb.EtcdMembers,
            pb.EtcdMemberListResponse,
        )

    async def EtcdLeaveCluster(
        self, request: pb.EtcdLeaveClusterRequest, context: _Context
    ) -> pb.EtcdLeaveClusterResponse:
        def leave(machine: Machine, _peer: Peer) -> pb.EtcdLeaveCluster:
            machine.etcd_leave()
            return pb.EtcdLeaveCluster()

        return await self._unary(
            "EtcdLeaveCluster", context, leave, pb.EtcdLeaveCluster, pb.EtcdLeaveClusterResponse
        )

    async def EtcdForfeitLeadership(
        self, request: pb.EtcdForfeitLeadershipRequest, context: _Context
    ) -> pb.EtcdForfeitLeadershipResponse:
        return await self._unary(
            "EtcdForfeitLeadership",
            context,
            lambda m, _p: pb.EtcdForfeitLeadership(member=m.etcd_forfeit_leadership()),
            pb.EtcdForfeitLeadership,
            pb.EtcdForfeitLeadershipResponse,
        )

    async def EtcdRemoveMemberByID(
        self, request: pb.EtcdRemoveMemberByIDRequest, context: _Context
    ) -> pb.EtcdRemoveMemberByIDResponse:
        def remove(machine: Machine, _peer: Peer) -> pb.EtcdRemoveMemberByID:
            machine.etcd_remove_member(request.member_id)
            return pb.EtcdRemoveMemberByID()

        return await self._unary(
            "EtcdRemoveMemberByID", context, remove, pb.EtcdRemoveMemberByID, pb.EtcdRemoveMemberByIDResponse
        )

    # --- streams ---

    async def _data(
        self, method: str, context: _Context, produce: Callable[[Machine], bytes]
    ) -> AsyncIterator[common_pb2.Data]:
        _peer, machine = await self._single(method, context)
        try:
            payload = produce(machine)
        except ApiError as e:
            await self._abort(context, e)
            return
        for i in range(0, max(len(payload), 1), CHUNK):
            yield common_pb2.Data(bytes=payload[i : i + CHUNK])

    # grpc.aio recognises streaming handlers by being async generator functions, hence the loops.
    async def EtcdSnapshot(
        self, request: pb.EtcdSnapshotRequest, context: _Context
    ) -> AsyncIterator[common_pb2.Data]:
        async for chunk in self._data("EtcdSnapshot", context, lambda m: m.etcd_snapshot()):
            yield chunk

    async def Kubeconfig(self, request: empty_pb2.Empty, context: _Context) -> AsyncIterator[common_pb2.Data]:
        async for chunk in self._data("Kubeconfig", context, lambda m: m.kubeconfig()):
            yield chunk

    async def EtcdRecover(
        self, request_iterator: AsyncIterator[common_pb2.Data], context: _Context
    ) -> pb.EtcdRecoverResponse:
        _peer, machine = await self._single("EtcdRecover", context)
        chunks = [chunk.bytes async for chunk in request_iterator]
        try:
            machine.etcd_recover(b"".join(chunks))
        except ApiError as e:
            await self._abort(context, e)
        return pb.EtcdRecoverResponse(messages=[pb.EtcdRecover()])

    async def Events(self, request: pb.EventsRequest, context: _Context) -> AsyncIterator[pb.Event]:
        _peer, machine = await self._single("Events", context)
        async for event in machine.events.follow(
            tail_events=request.tail_events,
            tail_id=request.tail_id,
            tail_seconds=request.tail_seconds,
            actor_id=request.with_actor_id,
        ):
            yield pb.Event(
                metadata=common_pb2.Metadata(hostname=machine.address),
                data=event.data,
                id=event.id,
                actor_id=event.actor_id,
            )
