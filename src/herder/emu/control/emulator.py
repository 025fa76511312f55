"""The emulator: many emulated Talos machines in one process, their clusters, and their persistence.

Each machine answers the Talos machine API on its own loopback address (``--machine-cidr``, port
``--machine-port``, 50000 like apid), because a Talos client checks the server certificate against its
cluster's CA before any metadata is read: one shared endpoint could not present every machine's
certificate honestly. The emulator's own control API (machines, power, faults) listens on ``--listen``.

``Emulator`` is where the layers meet: it is the host of its machines (``MachineHost``), the fleet the
Talos API answers for (``Fleet``), and the machines its cluster services follow (``ClusterMachines``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import uuid as uuidlib
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from herder.emu.cluster.kubelet import Kubelet
from herder.emu.cluster.services import ClusterServices
from herder.emu.cluster.state import Cluster
from herder.emu.control.bmcs import EmulatedBmcs
from herder.emu.control.store import Store
from herder.emu.machine.join import Joiner
from herder.emu.machine.lifecycle import Machine
from herder.emu.machine.network import Network
from herder.emu.machine.record import Hardware, MachineRecord
from herder.emu.machine.resource_service import ResourceService
from herder.emu.machine.service import MachineService, StorageService
from herder.emu.options import EmulatorOptions
from herder.talos.api.cosi import state_pb2_grpc
from herder.talos.api.machine import machine_pb2_grpc as pb_grpc
from herder.talos.api.storage import storage_pb2_grpc
from herder.talos.machine.types import MachineStage
from herder.talos.siderolink.kernel_args import parse as parse_join_args


class Emulator:
    def __init__(self, options: EmulatorOptions) -> None:
        self.options = options
        self.timings = options.timings
        self.store = Store(options.data_dir)
        self.machines: dict[str, Machine] = {}
        self.network: Network
        self._server: grpc.aio.Server | None = None
        self.bmc_url = ""
        """Where the BMCs' Redfish service listens (``--bmc``)."""
        self.services = ClusterServices(self)
        """The clusters, each with its etcd health and emulated Kubernetes API, following the machines."""
        self._waiting: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []
        """What ``wait_for`` callers wait on: each checked at every change, as it happens."""
        self._network = ipaddress.ip_network(options.machine_cidr)
        self._used: set[int] = set()
        self._cursor = int(self._network.network_address) + 1
        self.joiner: Joiner | None = None
        """How the machines join herder over SideroLink (``--join``)."""
        if options.join:
            self.joiner = Joiner(
                parse_join_args(options.join), keepalive=max(1, round(options.timings.siderolink_keepalive))
            )
        self.bmcs: EmulatedBmcs | None = None
        """The machines' BMCs and their Redfish service (``--bmc``)."""
        if options.bmc is not None:
            self.bmcs = EmulatedBmcs(
                self.store, lambda: self.machines, self.wait_for, options.bmc.username, options.bmc.password
            )
        self._published_power: dict[str, bool] = {}
        self.api_calls = 0
        """The Talos API calls (gRPC, machine and COSI state services) its machines have answered."""

    async def start(self) -> None:
        """Start the machines. An address a machine must serve on that is taken (another emulator on the
        same network) is an ``OSError`` saying which, before anything listens."""
        for cluster in self.store.load_clusters():
            self.services.adopt(cluster)
        for record in self.store.load_machines():
            self.machines[record.uuid] = Machine(self, record)
            self._used.add(int(ipaddress.ip_address(record.address)))
            if self.bmcs is not None:
                self.bmcs.attach(self.machines[record.uuid])
        missing = self.options.machines - len(self.machines)
        for _ in range(max(missing, 0)):
            machine = self._new_machine(
                self.options.talos_version, None, None, bare_metal=self.bmcs is not None
            )
            if self.bmcs is not None:
                self.bmcs.add(machine)
        for machine in self.machines.values():
            if self.joiner is None:  # a joined machine listens in a namespace of its own
                _check_free(machine)
        server = grpc.aio.server(
            interceptors=[_Counted(self)], options=[("grpc.max_receive_message_length", 64 << 20)]
        )
        pb_grpc.add_MachineServiceServicer_to_server(MachineService(self), server)  # type: ignore[no-untyped-call]
        state_pb2_grpc.add_StateServicer_to_server(ResourceService(self), server)  # type: ignore[no-untyped-call]
        storage_pb2_grpc.add_StorageServiceServicer_to_server(StorageService(self), server)  # type: ignore[no-untyped-call]
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        self._server = server
        self.network = Network(port)
        if self.bmcs is not None and self.options.bmc is not None:
            self.bmc_url = await self.bmcs.start(self.options.bmc.host, self.options.bmc.port)
        self._publish()
        for machine in self.machines.values():
            machine.start()

    async def stop(self) -> None:
        if self.bmcs is not None:
            await self.bmcs.stop()
        for machine in list(self.machines.values()):
            await machine.stop()
        await self.services.stop()
        await self.network.close()
        if self.joiner is not None:
            await self.joiner.close()
        if self._server is not None:
            await self._server.stop(grace=0.2)
            self._server = None

    # --- machines ---

    def _allocate_address(self) -> str:
        """The lowest free address of the machine network (skipping x.y.z.0 and x.y.z.255)."""
        last = int(self._network.broadcast_address)
        while self._cursor < last and (self._cursor in self._used or self._cursor & 0xFF in (0, 255)):
            self._cursor += 1
        if self._cursor >= last:
            raise ValueError(f"no free address left in {self._network}")
        self._used.add(self._cursor)
        return str(ipaddress.ip_address(self._cursor))

    def _new_machine(
        self, talos_version: str, uuid: str | None, hardware: Hardware | None, *, bare_metal: bool = False
    ) -> Machine:
        """A new machine: a cloud's (booting its Talos), or bare metal (powered off, nothing installed)."""
        if uuid is not None and uuid in self.machines:
            raise ValueError(f"machine {uuid} already exists")
        address = self._allocate_address()
        record = MachineRecord(
            uuid=uuid or str(uuidlib.uuid4()),
            address=address,
            port=self.options.machine_port,
            talos_version=talos_version,
            hardware=hardware or Hardware(),
            powered_on=not bare_metal,
        )
        self.store.save_machine(record)
        machine = Machine(self, record)
        self.machines[record.uuid] = machine
        return machine

    def create_machine(
        self, *, talos_version: str | None = None, uuid: str | None = None, hardware: Hardware | None = None
    ) -> Machine:
        """A new machine, powered on and booting into maintenance mode."""
        machine = self._new_machine(talos_version or self.options.talos_version, uuid, hardware)
        self._publish()
        machine.start()
        return machine

    async def destroy_machine(self, machine: Machine) -> None:
        await machine.stop()
        del self.machines[machine.uuid]
        freed = int(ipaddress.ip_address(machine.address))
        self._used.discard(freed)
        self._cursor = min(self._cursor, freed)
        self.store.delete_machine(machine.uuid)
        if self.bmcs is not None:
            self.bmcs.remove(machine.uuid)
        self._publish()
        # Its cluster sees it gone: its etcd member down, its node NotReady.
        booting = machine.stage is MachineStage.BOOTING
        self.services.machine_changed(machine.uuid, _cluster_id(machine), booting=booting, gone=True)

    def find(self, ref: str) -> Machine | None:
        """A machine by uuid, address, endpoint or hostname."""
        machine = self.machines.get(ref)
        if machine is not None:
            return machine
        return next((m for m in self.machines.values() if m.answers_to(ref)), None)

    # --- clusters ---

    @property
    def clusters(self) -> dict[str, Cluster]:
        return self.services.clusters

    def cluster(self, cluster_id: str) -> Cluster:
        return self.services.cluster(cluster_id)

    def machines_of(self, cluster_id: str) -> list[Machine]:
        return [m for m in self.machines.values() if _cluster_id(m) == cluster_id]

    def kubelets(self, cluster_id: str) -> list[Kubelet]:
        return [m.kubelet() for m in self.machines_of(cluster_id)]

    def running(self, uuid: str, cluster_id: str) -> bool:
        machine = self.machines.get(uuid)
        return machine is not None and machine.runs_in(cluster_id)

    def save_cluster(self, cluster: Cluster) -> None:
        self.store.save_cluster(cluster)

    # --- observation ---

    def summary(self, machine: Machine) -> dict[str, Any]:
        """What the control API shows of a machine: its own summary, and its BMC's (``bmc``: its address)."""
        return {**machine.summary(), **(self.bmcs.summary(machine.uuid) if self.bmcs else {"bmc": ""})}

    def _publish(self) -> None:
        """``machines.json``: each machine's uuid, endpoint, node, power (on or off) and BMC address."""
        self._published_power = {m.uuid: m.record.powered_on for m in self.machines.values()}
        self.store.publish(
            [
                {
                    "uuid": m.uuid,
                    "endpoint": m.record.endpoint,
                    "node": m.address,
                    "power": "on" if m.record.powered_on else "off",
                    "bmc": self.bmcs.address(m.uuid) if self.bmcs else "",
                }
                for m in self.machines.values()
            ]
        )

    def machine_changed(self, machine: Machine) -> None:
        if self._published_power.get(machine.uuid, machine.record.powered_on) != machine.record.powered_on:
            self._publish()
        booting = machine.stage is MachineStage.BOOTING
        self.services.machine_changed(machine.uuid, _cluster_id(machine), booting=booting)
        for predicate, held in list(self._waiting):
            # Now, and again once the code that made the change has finished with it (it may set more).
            _check(predicate, held)
            held.get_loop().call_soon(_check, predicate, held)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float) -> None:
        """Wait until ``predicate()`` holds, checked at every change as it happens (a stage a machine passes
        through in a moment is seen, however late the waiter runs); raises ``TimeoutError``."""
        if predicate():
            return
        entry = (predicate, asyncio.get_running_loop().create_future())
        self._waiting.append(entry)
        try:
            async with asyncio.timeout(timeout):
                await entry[1]
        finally:
            self._waiting.remove(entry)


def _check(predicate: Callable[[], bool], held: asyncio.Future[None]) -> None:
    if not held.done() and predicate():
        held.set_result(None)


def _check_free(machine: Machine) -> None:
    """Whether the machine's address can be listened on (as its listener will, reusing an address in
    TIME_WAIT): an ``OSError`` naming it and the flag that moves the machines if not."""
    with socket.socket(socket.AF_INET6 if ":" in machine.address else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((machine.address, machine.record.port))
        except OSError as exc:
            raise OSError(
                f"{machine.record.endpoint}, where emulated machine {machine.uuid} serves its Talos API, "
                f"cannot be listened on ({exc.strerror}): free it, or move the machines with --machine-cidr "
                "(another emulator may run on this network)",
            ) from None


def _cluster_id(machine: Machine) -> str:
    """The cluster the machine's config names, or empty in maintenance mode."""
    return machine.config.cluster_id if machine.config is not None else ""


class _Counted(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc.aio has no type stubs
    """Counts every call the Talos API serves, whatever its service: what following the machines costs
    them (a benchmark reads it from the control API's ``/summary``)."""

    def __init__(self, emulator: Emulator) -> None:
        self._emulator = emulator

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        self._emulator.api_calls += 1
        return await continuation(handler_call_details)
