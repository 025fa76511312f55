"""What talosctl reads to see inside a machine, from emulated machines through herder's client over real gRPC
with TLS: figures that move as a running machine's do and agree with each other, processes and containers
of the services the machine runs, its services' logs and the kernel's (tailed and followed), its files, and
the calls an operator makes on a running machine (services, containers, etcd maintenance)."""

from __future__ import annotations

import asyncio

import pytest

from herder.emu.control.emulator import Emulator
from herder.emu.machine.lifecycle import Machine
from herder.talos.machine import FailedPrecondition, MachineAPIError, MachineClient, MachineStage, NotFound
from tests.emu.support import ClusterConfigs, admin, bring_up, wait_stage


async def _cluster(emulator: Emulator, configs: ClusterConfigs) -> tuple[Machine, Machine]:
    cp, worker = list(emulator.machines.values())[:2]
    await asyncio.gather(
        bring_up(emulator, cp, configs.controlplane), bring_up(emulator, worker, configs.worker)
    )
    async with admin(configs, cp) as client:
        await client.bootstrap()
    return cp, worker


async def _lines(stream: object, count: int, timeout: float = 10) -> list[str]:
    """The first ``count`` items of a stream (bytes or text), as text lines."""
    got: list[str] = []

    async def take() -> None:
        async for item in stream:  # type: ignore[attr-defined]
            text = item.decode() if isinstance(item, bytes) else item
            got.extend(text.splitlines())
            if len(got) >= count:
                return

    await asyncio.wait_for(take(), timeout)
    await stream.aclose()  # type: ignore[attr-defined]
    return got


async def test_figures_move_and_agree(emulator: Emulator, cluster_a: ClusterConfigs) -> None:
    cp, worker = await _cluster(emulator, cluster_a)
    hardware = cp.record.hardware
    async with admin(cluster_a, cp) as client:
        assert await client.hostname() == cp.hostname
        first, first_stat, first_net = (
            await client.memory(),
            await client.system_stat(),
            await client.network_device_stats(),
        )
        await asyncio.sleep(1.1)
        second, second_stat, second_net = (
            await client.memory(),
            await client.system_stat(),
            await client.network_device_stats(),
        )
        assert first.memtotal == second.memtotal == hardware.memory_mib * 1024
        assert 0 < second.memfree < second.memavailable <= second.memtotal
        assert first.memfree != second.memfree  # memory moves
        # CPU seconds only grow, by no more than the CPUs could have worked meanwhile.
        assert first_stat.boot_time == second_stat.boot_time <= int(cp.booted_at) + 1
        grown = (second_stat.cpu_total.user + second_stat.cpu_total.system) - (
            first_stat.cpu_total.user + first_stat.cpu_total.system
        )
        assert 0 < grown < hardware.cpus * 1.5
        assert len(second_stat.cpu) == hardware.cpus
        assert second_net.total.rx_bytes > first_net.total.rx_bytes
        load = await client.load_avg()
        # Seconds after boot: the booting's work shows in the last minute, the longer averages lag behind
        # (they start from nothing, as a kernel's do).
        assert 0 < load.load1 < hardware.cpus and load.load1 >= load.load5 >= load.load15 >= 0
        assert len(await client.cpu_info()) == hardware.cpus
        disks = await client.disk_stats()
        assert [d.name for d in disks.devices] == ["sda"] and disks.total.read_sectors > 0
        mounted = {m.mounted_on: m for m in await client.mounts()}
        assert mounted["/var"].available < mounted["/var"].size
        # A worker holds less than a control plane (no etcd, no API server).
        assert (await client.memory(node=worker.address)).anonpages < second.anonpages


async def test_processes_and_containers_are_the_services_the_machine_runs(
    emulator: Emulator, cluster_a: ClusterConfigs
) -> None:
    cp, worker = await _cluster(emulator, cluster_a)
    async with admin(cluster_a, cp) as client:
        processes = {p.command: p for p in await client.processes()}
        assert processes["machined"].pid == 1 and processes["machined"].executable == "/sbin/init"
        assert {"apid", "trustd", "etcd", "kubelet", "kube-apiserver"} <= set(processes)
        assert all(p.resident_memory > 0 for p in processes.values() if p.pid != 2)
        on_worker = {p.command for p in await client.processes(node=worker.address)}
        assert "kubelet" in on_worker and "etcd" not in on_worker and "kube-apiserver" not in on_worker
        system = {c.id for c in await client.containers()}
        assert system == {"apid", "trustd", "etcd"}
        pods = {c.name: c for c in await client.containers(kubernetes=True)}
        assert pods["kube-apiserver"].pod_id == f"kube-system/kube-apiserver-{cp.hostname}"
        assert pods["kube-apiserver"].pid == processes["kube-apiserver"].pid
        assert {s.name for s in await client.stats(kubernetes=True)} == set(pods)
        listening = {(r.localport, r.process.name) for r in await client.netstat(listening=True, pids=True)}
        assert {(50000, "apid"), (50001, "trustd"), (2379, "etcd"), (6443, "kube-apiserver")} <= listening


async def test_logs_are_the_services_events_and_follow_what_happens(
    emulator: Emulator, cluster_a: ClusterConfigs
) -> None:
    cp, _worker = await _cluster(emulator, cluster_a)
    async with admin(cluster_a, cp) as client:
        etcd = b"".join([chunk async for chunk in client.logs("etcd")]).decode()
        assert "bootstrapped a new etcd cluster" in etcd
        kubelet = b"".join([chunk async for chunk in client.logs("kubelet")]).decode()
        assert f'"Successfully registered node" node="{cp.hostname}"' in kubelet
        machined = b"".join([chunk async for chunk in client.logs("machined", tail=2)]).decode()
        assert len(machined.splitlines()) == 2 and all(
            x.startswith("[talos] ") for x in machined.splitlines()
        )
        with pytest.raises(NotFound, match="not registered"):
            [chunk async for chunk in client.logs("nothing")]
        apiserver = b"".join(
            [c async for c in client.logs(f"kube-system/kube-apiserver-{cp.hostname}", kubernetes=True)]
        )
        assert b"Serving securely on [::]:6443" in apiserver

        # Following: the last line, then what the kubelet says when it is restarted.
        followed = client.logs("kubelet", follow=True, tail=1)
        first = await asyncio.wait_for(anext(followed), 10)
        assert b"Successfully registered node" in first
        assert await client.service("kubelet", "restart") == 'Service "kubelet" restarted'
        again = await asyncio.wait_for(anext(followed), 10)
        assert b"Successfully registered node" in again
        await followed.aclose()

        dmesg = [line async for line in client.dmesg()]
        assert dmesg[0].startswith("kern:  notice: [") and "Linux version" in dmesg[0]
        assert any("[talos]" in line and "machine stage: running" in line for line in dmesg)
        # Follow from now on: a new line appears when machined says something.
        live = client.dmesg(follow=True, tail=True)
        pending = asyncio.create_task(anext(live))
        await asyncio.sleep(0.3)
        assert not pending.done()
        await client.service("kubelet", "stop")
        assert "service[kubelet](Finished)" in await asyncio.wait_for(pending, 10)
        await live.aclose()


async def test_services_start_stop_and_restart_as_talos_allows(
    emulator: Emulator, cluster_a: ClusterConfigs
) -> None:
    cp, _worker = await _cluster(emulator, cluster_a)
    async with admin(cluster_a, cp) as client:
        assert await client.service("kubelet", "stop") == 'Service "kubelet" stopped'
        states = {s.id: s.state for s in await client.service_list()}
        assert states["kubelet"] == "Finished"
        assert "kubelet" not in {p.command for p in await client.processes()}
        assert await client.service("kubelet", "start") == 'Service "kubelet" started'
        assert {s.id: s.state for s in await client.service_list()}["kubelet"] == "Running"
        with pytest.raises(
            MachineAPIError, match='service "etcd" doesn\'t support restart operation via API'
        ):
            await client.service("etcd", "restart")
        with pytest.raises(MachineAPIError, match='service "nothing" not defined'):
            await client.service("nothing", "start")
        await client.restart(f"kube-system/kube-apiserver-{cp.hostname}", kubernetes=True)
        with pytest.raises(MachineAPIError, match='container "nothing" not found'):
            await client.restart("nothing")
        assert await client.etcd_alarms() == []
        assert await client.etcd_alarm_disarm() == []
        await client.etcd_defragment()
        assert "finished defragmenting" in b"".join([c async for c in client.logs("etcd")]).decode()


async def test_files_read_list_and_usage(emulator: Emulator, cluster_a: ClusterConfigs) -> None:
    cp, _worker = await _cluster(emulator, cluster_a)
    async with admin(cluster_a, cp) as client:
        assert b"".join([c async for c in client.read("/etc/hostname")]) == f"{cp.hostname}\n".encode()
        meminfo = b"".join([c async for c in client.read("/proc/meminfo")]).decode()
        assert f"MemTotal:{cp.record.hardware.memory_mib * 1024:>16} kB" in meminfo
        shim = b"".join([c async for c in client.read("/usr/bin/containerd-shim-runc-v2")])
        assert len(shim) == 10 << 20 and shim.startswith(b"\x7fELF")
        with pytest.raises(NotFound, match="no such file or directory"):
            [c async for c in client.read("/etc/nothing")]
        with pytest.raises(MachineAPIError, match="path must be a regular file"):
            [c async for c in client.read("/etc")]
        top = {f.name for f in await client.list_files("/")}
        assert {"/", "/etc", "/proc", "/usr", "/var"} <= top and "/etc/hostname" not in top
        everything = {f.relative_name: f for f in await client.list_files("/usr", recurse=True)}
        assert everything["bin/containerd-shim-runc-v2"].size == 10 << 20 and everything["bin"].is_dir
        usage = {u.name: u.size for u in await client.disk_usage("/usr")}
        assert usage["/usr"] == usage["/usr/bin"] >= (10 << 20) + (12 << 20)


async def test_maintenance_mode_answers_reads_but_has_no_etcd(emulator: Emulator) -> None:
    machine = next(iter(emulator.machines.values()))
    await wait_stage(emulator, machine, MachineStage.MAINTENANCE)
    async with MachineClient.insecure(machine.record.endpoint) as client:
        assert (await client.memory()).memtotal > 0
        assert {p.command for p in await client.processes()} >= {"machined", "udevd"}
        with pytest.raises(FailedPrecondition):
            await client.etcd_alarms()
