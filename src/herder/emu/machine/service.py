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
from herder.emu.machine.logs import CHUNK_LINES, dmesg_line
from herder.emu.machine.network import Peer
from herder.emu.machine.routing import Context, Fleet, Router
from herder.talos.api.common import common_pb2
from herder.talos.api.machine import machine_pb2 as pb
from herder.talos.api.machine import machine_pb2_grpc as pb_grpc
from herder.talos.api.storage import storage_pb2, storage_pb2_grpc
from herder.talos.machine import roles

CHUNK = 1 << 20

_R = TypeVar("_R")


async def unary(
    router: Router,
    method: str,
    context: Context,
    handler: Callable[[Machine, Peer], Any],
    message: Callable[..., Any],
    reply: Callable[..., _R],
) -> _R:
    """A one-to-many unary call (``method``: its full gRPC name), as apid answers it: one message per
    machine, a machine's error in its message's metadata when the call named ``nodes``."""
    peer, entry = await router.caller(method, context)
    targets, aggregate = await router.targets(entry, context)
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
        return await unary(self.router, _method(method), context, handler, message, reply)

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

    # --- what talosctl reads to see inside a machine ---

    async def _read(
        self,
        method: str,
        context: Context,
        answer: Callable[[Machine], Any],
        message: Callable[..., Any],
        reply: Callable[..., _R],
    ) -> _R:
        return await self._unary(method, context, lambda m, _p: answer(m), message, reply)

    async def Hostname(self, request: empty_pb2.Empty, context: Context) -> pb.HostnameResponse:
        return await self._read("Hostname", context, api.hostname, pb.Hostname, pb.HostnameResponse)

    async def Memory(self, request: empty_pb2.Empty, context: Context) -> pb.MemoryResponse:
        return await self._read("Memory", context, api.memory, pb.Memory, pb.MemoryResponse)

    async def LoadAvg(self, request: empty_pb2.Empty, context: Context) -> pb.LoadAvgResponse:
        return await self._read("LoadAvg", context, api.load_avg, pb.LoadAvg, pb.LoadAvgResponse)

    async def Processes(self, request: empty_pb2.Empty, context: Context) -> pb.ProcessesResponse:
        return await self._read("Processes", context, api.processes, pb.Process, pb.ProcessesResponse)

    async def SystemStat(self, request: empty_pb2.Empty, context: Context) -> pb.SystemStatResponse:
        return await self._read("SystemStat", context, api.system_stat, pb.SystemStat, pb.SystemStatResponse)

    async def CPUInfo(self, request: empty_pb2.Empty, context: Context) -> pb.CPUInfoResponse:
        return await self._read("CPUInfo", context, api.cpu_info, pb.CPUsInfo, pb.CPUInfoResponse)

    async def DiskStats(self, request: empty_pb2.Empty, context: Context) -> pb.DiskStatsResponse:
        return await self._read("DiskStats", context, api.disk_stats, pb.DiskStats, pb.DiskStatsResponse)

    async def NetworkDeviceStats(
        self, request: empty_pb2.Empty, context: Context
    ) -> pb.NetworkDeviceStatsResponse:
        return await self._read(
            "NetworkDeviceStats",
            context,
            api.network_device_stats,
            pb.NetworkDeviceStats,
            pb.NetworkDeviceStatsResponse,
        )

    async def Mounts(self, request: empty_pb2.Empty, context: Context) -> pb.MountsResponse:
        return await self._read("Mounts", context, api.mounts, pb.Mounts, pb.MountsResponse)

    async def Containers(self, request: pb.ContainersRequest, context: Context) -> pb.ContainersResponse:
        return await self._read(
            "Containers", context, lambda m: api.containers(m, request), pb.Container, pb.ContainersResponse
        )

    async def Stats(self, request: pb.StatsRequest, context: Context) -> pb.StatsResponse:
        return await self._read("Stats", context, lambda m: api.stats(m, request), pb.Stats, pb.StatsResponse)

    async def Netstat(self, request: pb.NetstatRequest, context: Context) -> pb.NetstatResponse:
        return await self._read(
            "Netstat", context, lambda m: api.netstat(m, request), pb.Netstat, pb.NetstatResponse
        )

    async def EtcdAlarmList(self, request: empty_pb2.Empty, context: Context) -> pb.EtcdAlarmListResponse:
        return await self._read(
            "EtcdAlarmList", context, api.etcd_alarms, pb.EtcdAlarm, pb.EtcdAlarmListResponse
        )

    # --- what an operator does to a running machine ---

    async def EtcdAlarmDisarm(self, request: empty_pb2.Empty, context: Context) -> pb.EtcdAlarmDisarmResponse:
        return await self._read(
            "EtcdAlarmDisarm", context, api.etcd_alarm_disarm, pb.EtcdAlarmDisarm, pb.EtcdAlarmDisarmResponse
        )

    async def EtcdDefragment(self, request: empty_pb2.Empty, context: Context) -> pb.EtcdDefragmentResponse:
        return await self._read(
            "EtcdDefragment", context, api.etcd_defragment, pb.EtcdDefragment, pb.EtcdDefragmentResponse
        )

    async def Restart(self, request: pb.RestartRequest, context: Context) -> pb.RestartResponse:
        return await self._read(
            "Restart", context, lambda m: api.restart(m, request), pb.Restart, pb.RestartResponse
        )

    async def ServiceStart(
        self, request: pb.ServiceStartRequest, context: Context
    ) -> pb.ServiceStartResponse:
        return await self._read(
            "ServiceStart",
            context,
            lambda m: api.service_start(m, request),
            pb.ServiceStart,
            pb.ServiceStartResponse,
        )

    async def ServiceStop(self, request: pb.ServiceStopRequest, context: Context) -> pb.ServiceStopResponse:
        return await self._read(
            "ServiceStop",
            context,
            lambda m: api.service_stop(m, request),
            pb.ServiceStop,
            pb.ServiceStopResponse,
        )

    async def ServiceRestart(
        self, request: pb.ServiceRestartRequest, context: Context
    ) -> pb.ServiceRestartResponse:
        return await self._read(
            "ServiceRestart",
            context,
            lambda m: api.service_restart(m, request),
            pb.ServiceRestart,
            pb.ServiceRestartResponse,
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

    async def Read(self, request: pb.ReadRequest, context: Context) -> AsyncIterator[common_pb2.Data]:
        async for chunk in self._data("Read", context, lambda m: api.read(m, request)):
            yield chunk

    async def _messages(
        self, method: str, context: Context, produce: Callable[[Machine], list[Any]]
    ) -> AsyncIterator[Any]:
        _peer, machine = await self.router.single(_method(method), context)
        try:
            messages = produce(machine)
        except ApiError as e:
            await self._abort(context, e)
            return
        for message in messages:
            yield message

    async def List(self, request: pb.ListRequest, context: Context) -> AsyncIterator[pb.FileInfo]:
        async for info in self._messages("List", context, lambda m: api.list_files(m, request)):
            yield info

    async def DiskUsage(
        self, request: pb.DiskUsageRequest, context: Context
    ) -> AsyncIterator[pb.DiskUsageInfo]:
        async for info in self._messages("DiskUsage", context, lambda m: api.disk_usage(m, request)):
            yield info

    async def Logs(self, request: pb.LogsRequest, context: Context) -> AsyncIterator[common_pb2.Data]:
        _peer, machine = await self.router.single(_method("Logs"), context)
        try:
            source, lines = api.log_source(machine, request)
        except ApiError as e:
            await self._abort(context, e)
            return
        if source is None:
            for line in lines:
                yield common_pb2.Data(bytes=line)
            return
        tail = request.tail_lines
        # A log's bytes go in chunks of lines, as Talos streams a log file.
        if not request.follow:
            kept = source.tail(tail)
            for start in range(0, len(kept), CHUNK_LINES):
                yield common_pb2.Data(
                    bytes=b"".join(api.log_text(e) for e in kept[start : start + CHUNK_LINES])
                )
            return
        async for chunk in source.follow_chunks(tail=tail):
            yield common_pb2.Data(bytes=b"".join(api.log_text(e) for e in chunk))

    async def Dmesg(self, request: pb.DmesgRequest, context: Context) -> AsyncIterator[common_pb2.Data]:
        _peer, machine = await self.router.single(_method("Dmesg"), context)
        kernel = machine.logs.kernel()
        # ``tail``: from now on only (with ``follow``).
        backlog = 0 if request.tail else -1
        if not request.follow:
            for line in kernel.tail(backlog):
                yield common_pb2.Data(bytes=dmesg_line(line))
            return
        async for line in kernel.follow(tail=backlog):
            yield common_pb2.Data(bytes=dmesg_line(line))

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


class StorageService(storage_pb2_grpc.StorageServiceServicer):
    """``storage.StorageService``, of which the emulator answers ``Disks`` (``BlockDeviceWipe`` is not
    herder's: UNIMPLEMENTED)."""

    def __init__(self, fleet: Fleet) -> None:
        self.router = Router(fleet)

    async def Disks(self, request: empty_pb2.Empty, context: Context) -> storage_pb2.DisksResponse:
        return await unary(
            self.router,
            f"/{roles.STORAGE_SERVICE}/Disks",
            context,
            lambda m, _p: api.disks(m),
            storage_pb2.Disks,
            storage_pb2.DisksResponse,
        )
