"""Talos's resource API (COSI's ``cosi.resource.State``: Get, List, Watch) on emulated machines, through
herder's client over real gRPC with TLS: what herder learns of a machine (UUID, hardware, disks, addresses,
stage), in maintenance mode and once configured, with the machine API's security."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import yaml

from herder.emu.control.emulator import Emulator
from herder.talos.api.cosi import state_pb2, state_pb2_grpc
from herder.talos.machine import (
    MachineAPIError,
    MachineClient,
    MachineStage,
    NotFound,
    PermissionDenied,
    Unauthenticated,
)
from herder.talos.machine import resources as res
from herder.talos.machine.resources import ResourceEvent, ResourceEventType
from herder.talos.talosconfig import dump_talosconfig
from tests.emu.clusters import eventually
from tests.emu.support import (
    ClusterConfigs,
    admin,
    bring_up,
    herder_cli,
    raw_channel,
    wait_stage,
)


async def test_a_machine_in_maintenance_tells_what_it_is(emulator: Emulator) -> None:
    machine = next(iter(emulator.machines.values()))
    await wait_stage(emulator, machine, MachineStage.MAINTENANCE)
    hardware = machine.record.hardware
    async with MachineClient.insecure(machine.record.endpoint) as client:
        system = await client.system_information()
        assert system.uuid == machine.uuid and system.manufacturer == hardware.manufacturer
        [cpu] = await client.processors()
        assert cpu.core_count == cpu.thread_count == hardware.cpus
        [memory] = await client.memory_modules()
        assert memory.size == hardware.memory_mib
        [disk] = await client.disks()
        assert (disk.dev_path, disk.size, disk.pretty_size) == ("/dev/sda", 100 << 30, "107 GB")
        assert disk.model == "QEMU HARDDISK"
        for name in res.NODE_ADDRESS_IDS:
            assert (await client.node_addresses(name)).addresses == (f"{machine.address}/32",)
        status = await client.machine_status()
        assert status.stage is MachineStage.MAINTENANCE and not status.ready

        # Metadata as machined's state keeps it: who writes the resource, its version, its times.
        item = await client.get_resource(res.HARDWARE, res.SYSTEM_INFORMATION, res.SYSTEM_INFORMATION_ID)
        md = item.metadata
        assert (md.owner, md.version, md.phase) == ("hardware.SystemInfoController", "1", "running")
        assert md.created is not None and md.created == md.updated
        assert item.node == machine.address

        # Errors as machined answers them.
        with pytest.raises(
            NotFound, match=r"resource Disks.block.talos.dev\(runtime/sdz@undefined\) doesn't exist"
        ):
            await client.get_resource(res.RUNTIME, res.DISK, "sdz")
        with pytest.raises(PermissionDenied, match='namespace "nowhere" is not supported'):
            await client.list_resources("nowhere", res.DISK)
        with pytest.raises(PermissionDenied, match='resource type "Secrets.talos.dev" is not supported'):
            await client.list_resources(res.RUNTIME, "Secrets.talos.dev")


async def test_types_resolve_by_alias_as_talosctl_resolves_them(emulator: Emulator) -> None:
    machine = next(iter(emulator.machines.values()))
    await wait_stage(emulator, machine, MachineStage.MAINTENANCE)
    async with MachineClient.insecure(machine.record.endpoint) as client:
        served = {d.type for d in await client.resource_definitions()}
        assert served == set(res.KINDS)
        for name, expected in (
            ("cpu", res.PROCESSOR),
            ("Disks", res.DISK),
            ("systeminformation", res.SYSTEM_INFORMATION),
            ("machinestatuses.runtime.talos.dev", res.MACHINE_STATUS),
            ("ms", res.MACHINE_STATUS),
            ("rd", res.RESOURCE_DEFINITION),
        ):
            assert (await client.resolve_resource_type(name)).type == expected, name
        with pytest.raises(NotFound, match="'nothing' is not registered"):
            await client.resolve_resource_type("nothing")
        namespaces = {n.metadata.id for n in await client.list_resources(res.META, res.NAMESPACE)}
        assert (
            namespaces
            == set(res.NAMESPACES)
            >= {res.META, res.HARDWARE, res.RUNTIME, res.NETWORK, res.CLUSTER}
        )


async def test_a_configured_machine_answers_its_cluster_only(
    emulator: Emulator, cluster_a: ClusterConfigs, cluster_b: ClusterConfigs
) -> None:
    cp, worker = list(emulator.machines.values())[:2]
    await asyncio.gather(
        bring_up(emulator, cp, cluster_a.controlplane), bring_up(emulator, worker, cluster_a.worker)
    )
    async with admin(cluster_a, cp) as client:
        status = await client.machine_status()
        assert status.stage is MachineStage.RUNNING and status.ready
        # Through the control plane's apid to the worker, with the node metadata.
        assert (await client.system_information(node=worker.address)).uuid == worker.uuid
        item = await client.get_resource(res.RUNTIME, res.MACHINE_STATUS, "machine", node=worker.address)
        assert item.node == worker.address and item.spec["stage"] == "running"
    # Read-only roles read resources.
    reader = MachineClient.from_talosconfig(cluster_a.talosconfig_with("os:reader"), endpoint=cp.address)
    async with reader:
        assert (await reader.system_information()).uuid == cp.uuid
    # Mutual TLS as for the machine API: no client certificate, or another cluster's, gets nothing.
    async with MachineClient.insecure(cp.record.endpoint, retries=0) as anonymous:
        with pytest.raises(Unauthenticated):
            await anonymous.machine_status()
    async with admin(cluster_b, cp, retries=0) as stranger:
        with pytest.raises(Unauthenticated):
            await stranger.machine_status()


async def _collect(events: AsyncIterator[ResourceEvent], into: list[ResourceEvent]) -> None:
    """Events until the stream ends (the machine's API goes down)."""
    with pytest.raises(MachineAPIError):
        async for event in events:
            into.append(event)


async def test_watch_streams_stage_changes(emulator: Emulator, cluster_a: ClusterConfigs) -> None:
    cp, spare = list(emulator.machines.values())[:2]
    await bring_up(emulator, cp, cluster_a.controlplane)
    seen: list[ResourceEvent] = []
    async with admin(cluster_a, cp) as client:
        watch = asyncio.create_task(_collect(client.watch_resources(res.RUNTIME, res.MACHINE_STATUS), seen))
        await eventually(lambda: any(e.type is ResourceEventType.BOOTSTRAPPED for e in seen))
        await client.upgrade("ghcr.io/siderolabs/installer:v1.14.0")
        await asyncio.wait_for(watch, 10)
    created, bootstrapped, *updates = seen
    assert created.type is ResourceEventType.CREATED and created.resource is not None
    assert created.resource.spec["stage"] == "running" and created.resource.spec["status"]["ready"] is True
    assert bootstrapped.type is ResourceEventType.BOOTSTRAPPED
    assert [e.type for e in updates] == [ResourceEventType.UPDATED] * len(updates)
    stages = [e.resource.spec["stage"] for e in updates if e.resource is not None]
    assert stages[:2] == ["upgrading", "rebooting"]
    first = updates[0]
    assert first.old is not None and first.old.spec["stage"] == "running"
    assert first.resource is not None
    assert int(first.resource.metadata.version) == int(created.resource.metadata.version) + 1

    # One resource, in maintenance mode: first as it is, then its changes (until the maintenance service
    # gives way to apid with mutual TLS).
    await wait_stage(emulator, spare, MachineStage.MAINTENANCE)
    seen.clear()
    async with MachineClient.insecure(spare.record.endpoint) as client:
        one = client.watch_resources(res.RUNTIME, res.MACHINE_STATUS, res.MACHINE_STATUS_ID)
        watch = asyncio.create_task(_collect(one, seen))
        await eventually(lambda: bool(seen))
        await client.apply_configuration(cluster_a.worker)
        await asyncio.wait_for(watch, 10)
    assert seen[0].type is ResourceEventType.CREATED and seen[0].resource is not None
    assert seen[0].resource.spec["stage"] == "maintenance"
    assert seen[1].resource is not None and seen[1].resource.spec["stage"] == "installing"


async def test_a_watched_resource_that_does_not_exist_starts_destroyed(emulator: Emulator) -> None:
    machine = next(iter(emulator.machines.values()))
    await wait_stage(emulator, machine, MachineStage.MAINTENANCE)
    async with MachineClient.insecure(machine.record.endpoint) as client:
        events = client.watch_resources(res.RUNTIME, res.DISK, "sdz")
        first = await anext(events)
        await events.aclose()
    assert first.type is ResourceEventType.DESTROYED and first.resource is not None
    assert first.resource.metadata.id == "sdz" and first.resource.spec is None


async def test_the_wire_carries_talos_specs(emulator: Emulator, cluster_a: ClusterConfigs) -> None:
    """The proto_spec is Talos's message (field numbers of api/resource/definitions), the yaml_spec its
    YAML; apid proxies this service one-to-one only."""
    cp = next(iter(emulator.machines.values()))
    await bring_up(emulator, cp, cluster_a.controlplane)
    async with raw_channel(cluster_a, cp) as channel:
        stub = state_pb2_grpc.StateStub(channel)  # type: ignore[no-untyped-call]
        system = state_pb2.GetRequest(
            namespace="hardware", type=res.SYSTEM_INFORMATION, id="systeminformation"
        )
        machine = state_pb2.GetRequest(namespace="runtime", type=res.MACHINE_STATUS, id="machine")
        got = await stub.Get(system, timeout=10)
        status = await stub.Get(machine, timeout=10)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Get(machine, metadata=(("nodes", cp.address), ("nodes", "127.0.0.1")), timeout=10)
    uuid = cp.uuid.encode()
    # SystemInformationSpec.uuid is field 5 (length-delimited: tag 0x2a).
    assert bytes([0x2A, len(uuid)]) + uuid in got.resource.spec.proto_spec
    assert yaml.safe_load(got.resource.spec.yaml_spec)["uuid"] == cp.uuid
    assert got.resource.metadata.version == "1" and got.resource.metadata.phase == "running"
    # MachineStatusSpec.stage is field 1, MACHINE_STAGE_RUNNING is 4; status.ready (field 2, then 1) true.
    assert status.resource.spec.proto_spec.startswith(b"\x08\x04\x12")
    assert b"\x08\x01" in status.resource.spec.proto_spec
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "one-2-many proxying is not supported" in (refused.value.details() or "")


def test_specs_encode_as_talos_does() -> None:
    disk = res.DiskSpec(dev_path="/dev/vda", size=10 << 30, pretty_size=res.pretty_size(10 << 30))
    # Talos writes the disk's sizes and flags even when empty, the rest only when set.
    assert yaml.safe_load(disk.to_yaml()) == {
        "dev_path": "/dev/vda",
        "size": 10 << 30,
        "pretty_size": "11 GB",
        "io_size": 0,
        "sector_size": 0,
        "readonly": False,
        "cdrom": False,
    }
    system = res.SystemInformationSpec(serial_number="S1", product_name="P")
    assert yaml.safe_load(system.to_yaml()) == {"productName": "P", "serialnumber": "S1"}
    status = res.MachineStatusSpec.of(MachineStage.SHUTTING_DOWN, False, (("time", "not synced"),))
    assert yaml.safe_load(status.to_yaml()) == {
        "stage": "shutting down",
        "status": {"ready": False, "unmetConditions": [{"name": "time", "reason": "not synced"}]},
    }
    assert res.MachineStatusSpec.model_validate(yaml.safe_load(status.to_yaml())) == status
    addresses = res.NodeAddressSpec(addresses=("10.5.0.2/24",)).to_proto().SerializeToString()
    # addresses: field 1 of NetIPPrefix{ip=1 (4 bytes), prefix_length=2}; sortAlgorithm v1 is the default.
    assert addresses == b"\x0a\x08\x0a\x04\x0a\x05\x00\x02\x10\x18"
    assert [res.pretty_size(n) for n in (5, 1000, 1999, 10**15)] == ["5 B", "1.0 kB", "2.0 kB", "1.0 PB"]


async def test_herder_talos_get(emulator: Emulator, cluster_a: ClusterConfigs, tmp_path: Path) -> None:
    cp, spare, worker = list(emulator.machines.values())[:3]
    await bring_up(emulator, cp, cluster_a.controlplane)
    await bring_up(emulator, worker, cluster_a.worker)
    await wait_stage(emulator, spare, MachineStage.MAINTENANCE)

    code, out, err = await herder_cli("talos", "get", "systeminformation", "--insecure", "-e", spare.address)
    assert code == 0, err
    header, row = out.splitlines()
    assert header.split()[:6] == ["NODE", "NAMESPACE", "TYPE", "ID", "VERSION", "MANUFACTURER"]
    assert row.split()[:5] == [spare.address, "hardware", "SystemInformation", "systeminformation", "1"]
    assert spare.uuid in row

    talosconfig = tmp_path / "talosconfig"
    talosconfig.write_text(dump_talosconfig(cluster_a.talosconfig))
    auth = ["--talosconfig", str(talosconfig), "-e", cp.address, "-n", cp.address]
    code, out, err = await herder_cli("talos", "get", "machinestatus", "machine", "-o", "yaml", *auth)
    assert code == 0, err
    document = yaml.safe_load(out)
    assert document["node"] == cp.address and document["metadata"]["type"] == res.MACHINE_STATUS
    assert document["spec"] == {"stage": "running", "status": {"ready": True, "unmetConditions": []}}
    code, out, err = await herder_cli("talos", "get", "disks", "-o", "json", *auth)
    assert code == 0, err
    assert json.loads(out)["spec"]["dev_path"] == "/dev/sda"
    code, out, err = await herder_cli("talos", "get", "nodeaddresses", *auth)
    assert code == 0 and len(out.splitlines()) == 1 + len(res.NODE_ADDRESS_IDS), err
    assert f'["{cp.address}/32"]' in out
    # Several nodes (comma-separated as with talosctl), through the control plane's apid.
    nodes = f"{cp.address},{worker.address}"
    code, out, err = await herder_cli(
        "talos", "get", "ms", "--talosconfig", str(talosconfig), "-e", cp.address, "-n", nodes
    )
    assert code == 0, err
    assert [row.split()[0] for row in out.splitlines()[1:]] == [cp.address, worker.address]

    code, _out, err = await herder_cli("talos", "get", "wishes", *auth)
    assert code == 1 and "'wishes' is not registered" in err
    code, _out, err = await herder_cli("talos", "get", "disks", "sdz", *auth)
    assert code == 1 and "doesn't exist" in err
    code, _out, err = await herder_cli("talos", "get", "disks", "-o", "xml", *auth)
    assert code == 1 and "unknown output 'xml'" in err


async def test_the_hostname_is_the_configs_or_made_up_as_talos_makes_it_up(
    emulator: Emulator, cluster_a: ClusterConfigs
) -> None:
    machine = next(iter(emulator.machines.values()))
    await wait_stage(emulator, machine, MachineStage.MAINTENANCE)
    async with MachineClient.insecure(machine.record.endpoint) as client:
        made_up = await client.hostname_status()
        assert made_up.hostname == machine.hostname and made_up.hostname.startswith("talos-")
        assert (await client.resolve_resource_type("hostname")).type == res.HOSTNAME_STATUS
    named = cluster_a.controlplane.replace(
        "kind: HostnameConfig\nauto: stable", "kind: HostnameConfig\nhostname: cp-one"
    )
    assert "hostname: cp-one" in named
    await bring_up(emulator, machine, named)
    async with admin(cluster_a, machine) as client:
        assert (await client.hostname_status()).hostname == "cp-one" == machine.hostname
        item = await client.get_resource(res.NETWORK, res.HOSTNAME_STATUS, res.HOSTNAME_STATUS_ID)
        assert item.metadata.owner == "network.HostnameStatusController"


async def test_what_talosctl_get_and_dashboard_read_of_a_cluster(
    emulator: Emulator, cluster_a: ClusterConfigs
) -> None:
    cp, worker = list(emulator.machines.values())[:2]
    await asyncio.gather(
        bring_up(emulator, cp, cluster_a.controlplane), bring_up(emulator, worker, cluster_a.worker)
    )
    async with admin(cluster_a, cp) as client:
        members = {
            m.metadata.id: m.typed(res.MemberSpec)
            for m in await client.list_resources(res.CLUSTER, res.MEMBER)
        }
        assert set(members) == {cp.hostname, worker.hostname}
        assert (
            members[cp.hostname].machine_type == "controlplane"
            and members[worker.hostname].machine_type == "worker"
        )
        assert members[worker.hostname].addresses == (worker.address,)
        assert (
            members[cp.hostname].control_plane is not None and members[worker.hostname].control_plane is None
        )
        info = await client.get_resource(res.CLUSTER, res.CLUSTER_INFO, res.CLUSTER_INFO_ID)
        assert info.spec["clusterName"] == "alpha"
        services = {s.metadata.id: s.spec for s in await client.list_resources(res.RUNTIME, res.SERVICE)}
        assert services["etcd"] == {"running": False, "healthy": False, "unknown": False}  # not bootstrapped
        assert services["kubelet"]["running"] is True
        await client.bootstrap()
        await eventually(lambda: cp.cluster is not None and cp.cluster.member_healthy(cp.uuid))
        etcd = await client.get_resource(res.RUNTIME, res.SERVICE, "etcd")
        assert etcd.spec["healthy"] is True and etcd.metadata.version != "1"  # it changed since
        kind = await client.get_resource(res.CONFIG, res.MACHINE_TYPE, res.MACHINE_TYPE_ID)
        assert kind.spec == "controlplane"
        version = await client.get_resource(res.RUNTIME, res.VERSION, res.VERSION_ID)
        assert version.spec["version"] == cp.record.talos_version
        routes = [
            r.typed(res.RouteStatusSpec) for r in await client.list_resources(res.NETWORK, res.ROUTE_STATUS)
        ]
        default = next(r for r in routes if not r.dst)
        assert default.out_link_name == "eth0" and default.gateway.startswith(cp.address.rsplit(".", 1)[0])
        links = {
            link.metadata.id: link.typed(res.LinkStatusSpec)
            for link in await client.list_resources(res.NETWORK, res.LINK_STATUS)
        }
        assert links["eth0"].operational_state == "up" and links["lo"].type == "loopback"
        pods = {p.metadata.id: p.spec for p in await client.list_resources(res.K8S, res.STATIC_POD_STATUS)}
        assert pods[f"kube-system/kube-apiserver-{cp.hostname}"]["phase"] == "Running"
        assert await client.list_resources(res.RUNTIME, res.EXTENSION_STATUS) == []
        for type, id in (
            (res.NETWORK_STATUS, res.NETWORK_STATUS_ID),
            (res.RESOLVER_STATUS, res.RESOLVER_STATUS_ID),
            (res.TIME_SERVER_STATUS, res.TIME_SERVER_STATUS_ID),
        ):
            assert (await client.get_resource(res.NETWORK, type, id)).spec
        # The proto_spec is Talos's message too (what talosctl -o yaml does not show, but a Go client reads).
        item = await client.get_resource(res.K8S, res.KUBELET_SPEC, res.KUBELET_SPEC_ID)
        assert item.spec["expectedNodename"] == cp.hostname
    # A sensitive type is os:admin's only, as machined decides it.
    reader = MachineClient.from_talosconfig(cluster_a.talosconfig_with("os:reader"), endpoint=cp.address)
    async with reader:
        with pytest.raises(PermissionDenied, match="not authorized"):
            await reader.get_resource(res.K8S, res.KUBELET_SPEC, res.KUBELET_SPEC_ID)
        assert (await reader.get_resource(res.RUNTIME, res.SERVICE, "etcd")).spec["running"] is True


async def test_a_watch_of_services_follows_a_service_stopped_and_started(
    emulator: Emulator, cluster_a: ClusterConfigs
) -> None:
    cp = next(iter(emulator.machines.values()))
    await bring_up(emulator, cp, cluster_a.controlplane)
    async with admin(cluster_a, cp) as client:
        changes = client.watch_resources(res.RUNTIME, res.SERVICE, "kubelet")
        first = await asyncio.wait_for(anext(changes), 10)
        assert first.resource is not None and first.resource.spec["running"] is True
        await client.service("kubelet", "stop")
        stopped = await asyncio.wait_for(anext(changes), 10)
        assert stopped.type is ResourceEventType.UPDATED and stopped.resource.spec["running"] is False  # type: ignore[union-attr]
        await changes.aclose()
