"""The gRPC ``machine.MachineService`` of every emulated machine, served by one internal server.

Each call is routed as apid does (``routing``): to the machine dialled, to the one named by the ``node``
metadata (one-to-one, errors as gRPC statuses), or to each of ``nodes`` (one-to-many, errors in each
message's metadata).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from google.protobuf import empty_pb2

from herder.emu.errors import ApiError
from herder.emu.machine import api
from herder.emu.machine.lifecycle import Machine
from herder.emu.machine.network import Peer
from herder.emu.machine.routing import Context, Fleet, Router
from herder.talos.api.common import common_pb2
from herder.talos.api.machine import machine_pb2 as pb
from herder.talos.api.machine import machine_pb2_grpc as pb_grpc
from herder.talos.machine import roles

CHUNK = 1 << 20

_R = TypeVar("_R")


class MachineService(pb_grpc.MachineServiceServicer):
    def __init__(self, fleet: Fleet) -> None:
        self.router = Router(fleet)

    async def _unary(
        self,
        method: str,
        context: Context,
        handler: Callable[[Machine, Peer], Any],
        message: Callable[..., Any],
        reply: Callable[..., _R],
    ) -> _R:
        peer, entry = await self.router.caller(_method(method), context)
        targets, aggregate = await self.router.targets(entry, context)
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

    async def _abort(self, context: Context, error: ApiError) -> None:
        await context.abort(error.code, error.message)

    # --- unary calls ---

    async def Version(self, request: empty_pb2.Empty, context: Context) -> pb.VersionResponse:
        return await self._unary(
            "Version", context, lambda m, _p: api.version(m), pb.Version, pb.VersionResponse
        )

    async def ApplyConfiguration(
        self, request: pb.ApplyConfigurationRequest, context: Context
    ) -> pb.ApplyConfigurationResponse:
        return await self._unary(
            "ApplyConfiguration",
            context,
            lambda m, p: api.apply_configuration(m, request, p.roles),
            pb.ApplyConfiguration,
            pb.ApplyConfigurationResponse,
        )

    async def Bootstrap(self, request: pb.BootstrapRequest, context: Context) -> pb.BootstrapResponse:
        return await self._unary(
            "Bootstrap", context, lambda m, _p: api.bootstrap(m, request), pb.Bootstrap, pb.BootstrapResponse
        )

    async def Upgrade(self, request: pb.UpgradeRequest, context: Context) -> pb.UpgradeResponse:
        return await self._unary(
            "Upgrade", context, lambda m, _p: api.upgrade(m, request), pb.Upgrade, pb.UpgradeResponse
        )

    async def Reboot(self, request: pb.RebootRequest, context: Context) -> pb.RebootResponse:
        return await self._unary("Reboot", context, lambda m, _p: api.reboot(m), pb.Reboot, pb.RebootResponse)

    async def Reset(self, request: pb.ResetRequest, context: Context) -> pb.ResetResponse:
        return await self._unary(
            "Reset", context, lambda m, _p: api.reset(m, request), pb.Reset, pb.ResetResponse
        )

    async def Shutdown(self, request: pb.ShutdownRequest, context: Context) -> pb.ShutdownResponse:
        return await self._unary(
            "Shutdown",
            context,
            lambda m, _p: api.shutdown(m),
            pb.Shutdown,
            pb.ShutdownResponse,
        )

    async def ServiceList(self, request: empty_pb2.Empty, context: Context) -> pb.ServiceListResponse:
        return await self._unary(
            "ServiceList",
            context,
            lambda m, _p: api.services(m),
            pb.ServiceList,
            pb.ServiceListResponse,
        )

    async def EtcdMemberList(
        self, request: pb.EtcdMemberListRequest, context: Context
    ) -> pb.EtcdMemberListResponse:
        return await self._unary(
            "EtcdMemberList",
            context,
            lambda m, _p: api.etcd_members(m),
            pb.EtcdMembers,
            pb.EtcdMemberListResponse,
        )

    async def EtcdStatus(self, request: empty_pb2.Empty, context: Context) -> pb.EtcdStatusResponse:
        return await self._unary(
            "EtcdStatus",
            context,
            lambda m, _p: api.etcd_status(m),
            pb.EtcdStatus,
            pb.EtcdStatusResponse,
        )

    async def EtcdLeaveCluster(
        self, request: pb.EtcdLeaveClusterRequest, context: Context
    ) -> pb.EtcdLeaveClusterResponse:
        return await self._unary(
            "EtcdLeaveCluster",
            context,
            lambda m, _p: api.etcd_leave(m),
            pb.EtcdLeaveCluster,
            pb.EtcdLeaveClusterResponse,
        )

    async def EtcdForfeitLeadership(
        self, request: pb.EtcdForfeitLeadershipRequest, context: Context
    ) -> pb.EtcdForfeitLeadershipResponse:
        return await self._unary(
            "EtcdForfeitLeadership",
            context,
            lambda m, _p: api.etcd_forfeit_leadership(m),
            pb.EtcdForfeitLeadership,
            pb.EtcdForfeitLeadershipResponse,
        )

    async def EtcdRemoveMemberByID(
        self, request: pb.EtcdRemoveMemberByIDRequest, context: Context
    ) -> pb.EtcdRemoveMemberByIDResponse:
        return await self._unary(
            "EtcdRemoveMemberByID",
            context,
            lambda m, _p: api.etcd_remove_member(m, request),
            pb.EtcdRemoveMemberByID,
            pb.EtcdRemoveMemberByIDResponse,
        )

    # --- streams ---

    async def _data(
        self, method: str, context: Context, produce: Callable[[Machine], bytes]
    ) -> AsyncIterator[common_pb2.Data]:
        _peer, machine = await self.router.single(_method(method), context)
        try:
            payload = produce(machine)
        except ApiError as e:
            await self._abort(context, e)
            return
        for i in range(0, max(len(payload), 1), CHUNK):
            yield common_pb2.Data(bytes=payload[i : i + CHUNK])

    # grpc.aio recognises streaming handlers by being async generator functions, hence the loops.
    async def EtcdSnapshot(
        self, request: pb.EtcdSnapshotRequest, context: Context
    ) -> AsyncIterator[common_pb2.Data]:
        async for chunk in self._data("EtcdSnapshot", context, api.etcd_snapshot):
            yield chunk

    async def Kubeconfig(self, request: empty_pb2.Empty, context: Context) -> AsyncIterator[common_pb2.Data]:
        async for chunk in self._data("Kubeconfig", context, api.kubeconfig):
            yield chunk

    async def EtcdRecover(
        self, request_iterator: AsyncIterator[common_pb2.Data], context: Context
    ) -> pb.EtcdRecoverResponse:
        _peer, machine = await self.router.single(_method("EtcdRecover"), context)
        chunks = [chunk.bytes async for chunk in request_iterator]
        try:
            api.etcd_recover(machine, b"".join(chunks))
        except ApiError as e:
            await self._abort(context, e)
        return pb.EtcdRecoverResponse(messages=[pb.EtcdRecover()])

    async def Events(self, request: pb.EventsRequest, context: Context) -> AsyncIterator[pb.Event]:
        _peer, machine = await self.router.single(_method("Events"), context)
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


def _method(name: str) -> str:
    return f"/{roles.SERVICE}/{name}"
