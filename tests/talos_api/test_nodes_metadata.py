"""apid's deprecated one-to-many targeting (``nodes`` metadata), as talosctl with several -n uses it: one
message per node, a node's failure reported in its message's metadata instead of failing the call."""

from __future__ import annotations

from google.protobuf import empty_pb2

from herder.emu.control.emulator import Emulator
from herder.talos.api.machine import machine_pb2_grpc
from tests.emu.support import ClusterConfigs, bring_up, raw_channel


async def test_nodes_metadata_aggregates_replies(emulator: Emulator, cluster_a: ClusterConfigs) -> None:
    cp, worker, maintenance = list(emulator.machines.values())[:3]
    await bring_up(emulator, cp, cluster_a.controlplane)
    await bring_up(emulator, worker, cluster_a.worker)
    async with raw_channel(cluster_a, cp) as channel:
        stub = machine_pb2_grpc.MachineServiceStub(channel)  # type: ignore[no-untyped-call]
        metadata = (("nodes", cp.address), ("nodes", worker.address), ("nodes", maintenance.address))
        reply = await stub.Version(empty_pb2.Empty(), metadata=metadata, timeout=10)
    by_node = {m.metadata.hostname: m for m in reply.messages}
    assert set(by_node) == {cp.address, worker.address, maintenance.address}
    assert by_node[worker.address].version.tag == worker.record.talos_version
    assert not by_node[worker.address].metadata.error
    assert "authentication handshake failed" in by_node[maintenance.address].metadata.error
