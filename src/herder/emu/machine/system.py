"""What an emulated machine's kernel and runtime report when asked: memory, load, CPU times and CPU info, disk
and network counters, mounts, processes, containers and sockets (its files are ``files``).

Everything is computed at the moment of the call from what the machine is (its hardware, its role, the
services it runs) and how long ago it booted, so that nothing runs per machine between calls (a large
emulator's machines cost nothing until someone looks), and the figures move between calls as a real
machine's do: load and memory wave around a level that depends on the machine's role and is higher just
after boot, cumulative counters (CPU seconds, sectors, bytes) only grow, and the load is the rate at which
the CPU seconds grow. Each machine has its own phase and level (from its UUID), so machines differ.
"""

from __future__ import annotations

import functools
import hashlib
import math
import random
import time
from dataclasses import dataclass

from herder.emu.cluster.kube_facts import KubeFacts
from herder.emu.cluster.state import url_host
from herder.emu.machine.record import Hardware
from herder.talos.api.machine import machine_pb2 as pb

MIB = 1 << 20
KIB = 1 << 10
_PERIOD = 300.0
"""Seconds of one wave of a machine's load."""
_BOOT_DECAY = 20.0
"""How fast the work of booting dies down (seconds)."""
_BOOT_BUSY = 0.45
"""The share of each CPU busy at the very start of a boot."""
_SECTOR = 512


@dataclass(frozen=True)
class Host:
    """What the figures are computed from (``api`` reads it off a machine)."""

    uuid: str
    hostname: str
    address: str
    hardware: Hardware
    booted_at: float
    talos_version: str
    services: tuple[str, ...]
    """The services running now."""
    control_plane: bool
    kubernetes: KubeFacts | None
    """What its config says of Kubernetes (None in maintenance mode)."""

    def uptime(self, now: float) -> float:
        return max(now - self.booted_at, 0.0)


@functools.lru_cache(maxsize=4096)
def _seed(uuid: str) -> float:
    """A number in [0, 1) of the machine's own (its phase and its level)."""
    return int.from_bytes(hashlib.sha256(uuid.encode()).digest()[:4], "big") / 2**32


def _busy(host: Host) -> tuple[float, float]:
    """(level, amplitude) of the share of each CPU its services keep busy."""
    level = 0.03 + 0.02 * _seed(host.uuid)
    if host.kubernetes is not None:
        level += 0.04
    if host.control_plane:
        level += 0.08
    return level, level * 0.6


def _utilization(host: Host, t: float) -> float:
    """The share of each CPU busy ``t`` seconds after boot."""
    level, amplitude = _busy(host)
    phase = 2 * math.pi * _seed(host.uuid)
    return (
        level
        + amplitude * math.sin(2 * math.pi * t / _PERIOD + phase)
        + _BOOT_BUSY * math.exp(-t / _BOOT_DECAY)
    )


def _cpu_seconds(host: Host, t: float) -> float:
    """Busy seconds of one CPU since boot: the integral of ``_utilization`` (so it only grows)."""
    level, amplitude = _busy(host)
    phase = 2 * math.pi * _seed(host.uuid)
    omega = 2 * math.pi / _PERIOD
    wave = amplitude / omega * (math.cos(phase) - math.cos(omega * t + phase))
    return level * t + wave + _BOOT_BUSY * _BOOT_DECAY * (1 - math.exp(-t / _BOOT_DECAY))


# --- processes ---


@dataclass(frozen=True)
class _Program:
    command: str
    executable: str
    args: str
    threads: int
    rss_mib: float
    cpu_share: float
    """Its share of the machine's busy CPU time."""


def _programs(host: Host) -> list[tuple[str, _Program]]:
    """(service, program) of every process the machine runs, in the order they start."""
    node = host.hostname
    out: list[tuple[str, _Program]] = [
        ("machined", _Program("machined", "/sbin/init", "/sbin/init", 14, 92, 0.08)),
        ("udevd", _Program("udevd", "/sbin/udevd", "/sbin/udevd --resolve-names=never", 1, 6, 0.005)),
    ]
    running = set(host.services)
    table = {
        "apid": _Program("apid", "/apid", "/apid", 12, 38, 0.03),
        "trustd": _Program("trustd", "/trustd", "/trustd", 9, 22, 0.005),
        "containerd": _Program(
            "containerd",
            "/bin/containerd",
            "/bin/containerd --address /system/run/containerd/containerd.sock --state /system/run/containerd "
            "--root /system/var/lib/containerd",
            16,
            44,
            0.02,
        ),
        "cri": _Program(
            "containerd",
            "/bin/containerd",
            "/bin/containerd --address /run/containerd/containerd.sock --config /etc/cri/containerd.toml",
            18,
            64,
            0.05,
        ),
        "etcd": _Program(
            "etcd",
            "/usr/local/bin/etcd",
            f"/usr/local/bin/etcd --name={node} --data-dir=/var/lib/etcd --listen-client-urls=https://0.0.0.0:2379 "
            f"--listen-peer-urls=https://0.0.0.0:2380 --advertise-client-urls=https://{url_host(host.address)}:2379",
            18,
            180,
            0.22,
        ),
        "kubelet": _Program(
            "kubelet",
            "/usr/local/bin/kubelet",
            "/usr/local/bin/kubelet --config=/etc/kubernetes/kubelet.yaml --kubeconfig=/etc/kubernetes/kubeconfig-kubelet "
            f"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubeconfig --hostname-override={node}",
            20,
            110,
            0.12,
        ),
    }
    for service in ("apid", "trustd", "containerd", "cri", "etcd", "kubelet"):
        if service in running:
            out.append((service, table[service]))
    for pod in _pods(host):
        out.append(
            ("kubelet", _Program("containerd-shim", "/bin/containerd-shim-runc-v2", "", 12, 14, 0.002))
        )
        out.append(
            ("kubelet", _Program(pod.name, pod.executable, pod.args, pod.threads, pod.rss_mib, pod.cpu_share))
        )
    return out


@dataclass(frozen=True)
class _Pod:
    name: str
    namespace: str
    image: str
    executable: str
    args: str
    threads: int
    rss_mib: float
    cpu_share: float

    def pod_id(self, hostname: str) -> str:
        static = self.name.startswith("kube-") and self.name != "kube-proxy"
        return (
            f"{self.namespace}/{self.name}-{hostname}"
            if static
            else f"{self.namespace}/{self.name}-{_short(self.name + hostname)}"
        )


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:5]


def _pods(host: Host) -> list[_Pod]:
    """The Kubernetes containers of the machine (static pods on a control plane, the add-ons' daemons)."""
    facts = host.kubernetes
    if facts is None or "kubelet" not in host.services:
        return []
    pods: list[_Pod] = []
    if host.control_plane:
        pods += [
            _Pod("kube-apiserver", "kube-system", facts.apiserver_image, "/usr/local/bin/kube-apiserver",
                 "kube-apiserver --etcd-servers=https://localhost:2379 --secure-port=6443", 14, 420, 0.25),
        ]  # fmt: skip
        if facts.controller_manager:
            pods.append(
                _Pod("kube-controller-manager", "kube-system", facts.controller_manager_image,
                     "/usr/local/bin/kube-controller-manager", "kube-controller-manager --leader-elect=true", 9, 90, 0.06)
            )  # fmt: skip
        if facts.scheduler:
            pods.append(
                _Pod("kube-scheduler", "kube-system", facts.scheduler_image, "/usr/local/bin/kube-scheduler",
                     "kube-scheduler --leader-elect=true", 10, 40, 0.02)
            )  # fmt: skip
    if facts.proxy:
        pods.append(
            _Pod("kube-proxy", "kube-system", facts.proxy_image, "/usr/local/bin/kube-proxy",
                 "kube-proxy --config=/etc/kubernetes/kube-proxy.yaml", 8, 32, 0.01)
        )  # fmt: skip
    if facts.flannel:
        pods.append(
            _Pod("kube-flannel", "kube-system", "ghcr.io/siderolabs/flannel:v0.26.4", "/opt/bin/flanneld",
                 "/opt/bin/flanneld --ip-masq --kube-subnet-mgr", 9, 28, 0.01)
        )  # fmt: skip
    return pods


def processes(host: Host, now: float) -> list[pb.ProcessInfo]:
    """The machine's processes as ``talosctl processes`` lists them: kernel threads, then machined (PID 1)
    and what it started, each with the CPU time and memory of its share of the machine's work."""
    t = host.uptime(now)
    busy = _cpu_seconds(host, t) * host.hardware.cpus
    out = [
        pb.ProcessInfo(pid=2, ppid=0, state="S", threads=1, command="kthreadd", cpu_time=round(t * 1e-4, 2)),
    ]
    rng = random.Random(host.uuid)
    pid = 1
    for service, program in _programs(host):
        if pid == 1:
            this, parent = 1, 0
            pid = 400 + rng.randrange(200)
        else:
            pid += 1 + rng.randrange(40)
            this, parent = pid, 1
        wobble = 1 + 0.04 * math.sin(t / 37 + this)
        out.append(
            pb.ProcessInfo(
                pid=this,
                ppid=parent,
                state="S",
                threads=program.threads,
                cpu_time=round(busy * program.cpu_share, 2),
                virtual_memory=int(program.rss_mib * 9 * MIB),
                resident_memory=int(program.rss_mib * wobble * MIB),
                command=program.command,
                executable=program.executable,
                args=program.args or program.executable,
                label=f"system_u:system_r:{service}_t:s0" if service != "kubelet" else "",
            )
        )
    return sorted(out, key=lambda p: p.pid)


def _resident_kib(host: Host, now: float) -> int:
    return sum(p.resident_memory for p in processes(host, now)) // KIB


# --- memory, load, CPU ---


def memory(host: Host, now: float) -> pb.MemInfo:
    """``/proc/meminfo`` (KiB): what the processes hold, a page cache that grows with uptime, the kernel's."""
    total = host.hardware.memory_mib * KIB
    t = host.uptime(now)
    anon = _resident_kib(host, now)
    kernel = 120 * KIB + total // 100
    cache = min(int(total * 0.25), int((300 + 2.0 * t**0.5 * 10) * KIB))
    buffers = 24 * KIB + int(8 * KIB * math.sin(t / 53) ** 2)
    used = min(anon + kernel + cache + buffers, total - 64 * KIB)
    free = total - used
    return pb.MemInfo(
        memtotal=total,
        memfree=free,
        memavailable=free + cache + buffers,
        buffers=buffers,
        cached=cache,
        active=anon // 2 + cache // 2,
        inactive=anon // 2 + cache // 2,
        activeanon=anon // 2,
        inactiveanon=anon // 2,
        activefile=cache // 2,
        inactivefile=cache // 2,
        anonpages=anon,
        mapped=anon // 4,
        shmem=12 * KIB,
        slab=kernel // 2,
        sreclaimable=kernel // 4,
        sunreclaim=kernel // 4,
        kernelstack=8 * KIB,
        pagetables=anon // 100,
        commitlimit=total // 2,
        committedas=anon * 3,
        vmalloctotal=34359738367,
        vmallocused=40 * KIB,
        hugepagesize=2048,
        directmap4k=200 * KIB,
        directmap2m=total - 200 * KIB,
    )


def load_avg(host: Host, now: float) -> tuple[float, float, float]:
    """``/proc/loadavg``: the number of busy CPUs, averaged over 1, 5 and 15 minutes."""
    t = host.uptime(now)
    cpus = host.hardware.cpus

    def average(window: float) -> float:
        start = max(t - window, 0.0)
        if t - start < 1:
            return cpus * _utilization(host, t)
        return cpus * (_cpu_seconds(host, t) - _cpu_seconds(host, start)) / window

    return round(average(60), 2), round(average(300), 2), round(average(900), 2)


def _cpu(host: Host, t: float, share: float) -> pb.CPUStat:
    busy = _cpu_seconds(host, t) * share
    return pb.CPUStat(
        user=round(busy * 0.62, 2),
        nice=0.0,
        system=round(busy * 0.27, 2),
        idle=round(max(t * share - busy, 0.0), 2),
        iowait=round(busy * 0.06, 2),
        irq=round(busy * 0.01, 2),
        soft_irq=round(busy * 0.04, 2),
        steal=0.0,
    )


def system_stat(host: Host, now: float) -> pb.SystemStat:
    """``/proc/stat``: CPU seconds since boot, per CPU and in total, interrupts and context switches."""
    t = host.uptime(now)
    cpus = host.hardware.cpus
    busy = _cpu_seconds(host, t) * cpus
    return pb.SystemStat(
        boot_time=int(host.booted_at),
        cpu_total=_cpu(host, t, cpus),
        cpu=[_cpu(host, t, 1) for _ in range(cpus)],
        irq_total=int(busy * 2400 + t * 150),
        context_switches=int(busy * 9000 + t * 400),
        process_created=int(300 + t * 0.8),
        process_running=max(1, round(cpus * _utilization(host, t))),
        process_blocked=0,
        soft_irq_total=int(busy * 1500 + t * 90),
        soft_irq=pb.SoftIRQStat(
            timer=int(t * 250),
            net_rx=int(busy * 400),
            net_tx=int(busy * 50),
            block=int(busy * 30),
            sched=int(busy * 600),
            rcu=int(t * 40),
        ),
    )


def cpu_info(host: Host) -> list[pb.CPUInfo]:
    cpus = host.hardware.cpus
    return [
        pb.CPUInfo(
            processor=i,
            vendor_id="GenuineIntel",
            cpu_family="6",
            model="85",
            model_name="Intel Xeon Processor (Cascadelake)",
            stepping="7",
            microcode="0x1",
            cpu_mhz=2593.906,
            cache_size="16384 KB",
            physical_id="0",
            siblings=cpus,
            core_id=str(i),
            cpu_cores=cpus,
            apic_id=str(i),
            initial_apic_id=str(i),
            fpu="yes",
            fpu_exception="yes",
            cpu_id_level=13,
            wp="yes",
            flags=[
                "fpu",
                "vme",
                "de",
                "pse",
                "tsc",
                "msr",
                "pae",
                "mce",
                "cx8",
                "apic",
                "sep",
                "mtrr",
                "pge",
                "mca",
                "cmov",
                "pat",
                "pse36",
                "clflush",
                "mmx",
                "fxsr",
                "sse",
                "sse2",
                "ss",
                "syscall",
                "nx",
                "pdpe1gb",
                "rdtscp",
                "lm",
                "constant_tsc",
                "rep_good",
                "nopl",
                "xtopology",
                "cpuid",
                "pni",
                "pclmulqdq",
                "ssse3",
                "fma",
                "cx16",
                "pcid",
                "sse4_1",
                "sse4_2",
                "x2apic",
                "movbe",
                "popcnt",
                "aes",
                "xsave",
                "avx",
                "f16c",
                "rdrand",
                "hypervisor",
                "avx2",
                "avx512f",
            ],
            bugs=["spectre_v1", "spectre_v2", "spec_store_bypass", "swapgs"],
            bogo_mips=5187.81,
            cl_flush_size=64,
            cache_alignment=64,
            address_sizes="46 bits physical, 48 bits virtual",
        )
        for i in range(cpus)
    ]


# --- disks, network, mounts ---


def _disk_names(host: Host) -> list[tuple[str, int]]:
    return [(str(d["name"]).removeprefix("/dev/"), int(d["size"])) for d in host.hardware.disks]


def disk_stats(host: Host, now: float) -> pb.DiskStats:
    """``/proc/diskstats``: what the boot read, then what the services keep writing (etcd most)."""
    t = host.uptime(now)
    write_rate = 60.0 if host.control_plane else 12.0  # sectors a second
    devices = []
    for index, (name, _size) in enumerate(_disk_names(host)):
        weight = 1.0 if index == 0 else 0.05
        reads = int((2_400_000 + 40 * t) * weight)
        writes = int((50_000 + write_rate * t) * weight)
        devices.append(
            pb.DiskStat(
                name=name,
                read_completed=reads // 64,
                read_merged=reads // 512,
                read_sectors=reads,
                read_time_ms=reads // 200,
                write_completed=writes // 16,
                write_merged=writes // 64,
                write_sectors=writes,
                write_time_ms=writes // 40,
                io_time_ms=(reads + writes) // 150,
                io_time_weighted_ms=(reads + writes) // 100,
            )
        )
    total = pb.DiskStat(name="total")
    for device in devices:
        for field in ("read_completed", "read_sectors", "read_time_ms", "write_completed", "write_sectors",
                      "write_time_ms", "io_time_ms", "io_time_weighted_ms"):  # fmt: skip
            setattr(total, field, getattr(total, field) + getattr(device, field))
    return pb.DiskStats(total=total, devices=devices)


def network_device_stats(host: Host, now: float) -> pb.NetworkDeviceStats:
    """``/proc/net/dev``: loopback (the services talk to each other) and the machine's one link."""
    t = host.uptime(now)
    talk = 9000.0 if host.control_plane else 2500.0  # bytes a second on the link
    devices = [
        pb.NetDev(name="lo", rx_bytes=int(t * talk * 3), rx_packets=int(t * talk * 3 / 900),
                  tx_bytes=int(t * talk * 3), tx_packets=int(t * talk * 3 / 900)),
        pb.NetDev(name="eth0", rx_bytes=int(350 * MIB + t * talk), rx_packets=int(240_000 + t * talk / 1100),
                  rx_multicast=int(t / 30), tx_bytes=int(2 * MIB + t * talk * 0.8),
                  tx_packets=int(8000 + t * talk * 0.8 / 700)),
    ]  # fmt: skip
    total = pb.NetDev(name="total")
    for device in devices:
        for field in ("rx_bytes", "rx_packets", "rx_multicast", "tx_bytes", "tx_packets"):
            setattr(total, field, getattr(total, field) + getattr(device, field))
    return pb.NetworkDeviceStats(total=total, devices=devices)


def mounts(host: Host, now: float) -> list[pb.MountStat]:
    """What ``talosctl mounts`` shows: the read-only system image, the in-memory ones, and on the system
    disk STATE (the config) and EPHEMERAL (``/var``, which fills as the machine runs)."""
    t = host.uptime(now)
    memory_bytes = host.hardware.memory_mib * MIB
    disks = _disk_names(host)
    disk, size = disks[0] if disks else ("sda", 10 << 30)
    var = max(size - (2 << 30), 1 << 30)
    used = min(var // 2, int(3 * (1 << 30) + t * 2000 * (3 if host.control_plane else 1)))
    return [
        pb.MountStat(filesystem="rootfs", size=78 * MIB, available=0, mounted_on="/"),
        pb.MountStat(filesystem="devtmpfs", size=memory_bytes // 2, available=memory_bytes // 2, mounted_on="/dev"),
        pb.MountStat(filesystem="tmpfs", size=memory_bytes // 2, available=memory_bytes // 2 - 2 * MIB,
                     mounted_on="/run"),
        pb.MountStat(filesystem="tmpfs", size=memory_bytes // 2, available=memory_bytes // 2 - 600 * KIB,
                     mounted_on="/system"),
        pb.MountStat(filesystem=f"/dev/{disk}3", size=100 * MIB, available=100 * MIB - 36 * KIB,
                     mounted_on="/system/state"),
        pb.MountStat(filesystem=f"/dev/{disk}4", size=var, available=var - used, mounted_on="/var"),
    ]  # fmt: skip


# --- containers ---

SYSTEM_NAMESPACE = "system"
CRI_NAMESPACE = "k8s.io"


@dataclass(frozen=True)
class ContainerView:
    info: pb.ContainerInfo
    stat: pb.Stat


def containers(host: Host, now: float, *, cri: bool) -> list[ContainerView]:
    """The system services run as containers (containerd's ``system`` namespace) or the Kubernetes ones (the
    CRI's ``k8s.io``), each with what it uses now."""
    t = host.uptime(now)
    busy = _cpu_seconds(host, t) * host.hardware.cpus
    out: list[ContainerView] = []
    if not cri:
        for service in ("apid", "trustd", "etcd"):
            if service not in host.services:
                continue
            program = dict(_programs(host))[service]
            info = pb.ContainerInfo(namespace=SYSTEM_NAMESPACE, id=service, internal_id=service,
                                    image=_system_image(host, service), pid=_pid_of(host, now, service),
                                    status="RUNNING", pod_id="", name=service)  # fmt: skip
            stat = pb.Stat(namespace=SYSTEM_NAMESPACE, id=service, name=service, pod_id="",
                           memory_usage=int(program.rss_mib * MIB), cpu_usage=int(busy * program.cpu_share * 1e9))  # fmt: skip
            out.append(ContainerView(info, stat))
        return out
    for pod in _pods(host):
        pod_id = pod.pod_id(host.hostname)
        container_id = hashlib.sha256((host.uuid + pod.name).encode()).hexdigest()
        info = pb.ContainerInfo(namespace=CRI_NAMESPACE, id=f"{pod_id}:{pod.name}:{container_id[:12]}",
                                uid=container_id[:8] + "-" + container_id[8:12] + "-" + container_id[12:16]
                                + "-" + container_id[16:20] + "-" + container_id[20:32],
                                internal_id=container_id, image=pod.image, pid=_pid_of(host, now, pod.name),
                                status="CONTAINER_RUNNING", pod_id=pod_id, name=pod.name,
                                network_namespace="/proc/1/ns/net")  # fmt: skip
        stat = pb.Stat(namespace=CRI_NAMESPACE, id=info.id, name=pod.name, pod_id=pod_id,
                       memory_usage=int(pod.rss_mib * MIB), cpu_usage=int(busy * pod.cpu_share * 1e9))  # fmt: skip
        out.append(ContainerView(info, stat))
    return out


def _system_image(host: Host, service: str) -> str:
    if service == "etcd":
        return "gcr.io/etcd-development/etcd:v3.5.17"
    return f"ghcr.io/siderolabs/{service}:{host.talos_version}"


def _pid_of(host: Host, now: float, command: str) -> int:
    return next((p.pid for p in processes(host, now) if p.command == command), 0)


def pod_logs(host: Host, pod_name: str, now: float) -> list[str]:
    """What a Kubernetes container of the machine has logged since it started (klog lines)."""
    start = host.booted_at + 8
    stamp = _klog_time(start)
    lines = {
        "kube-apiserver": [
            f"I{stamp}       1 options.go:228] external host was not specified, using {host.address}",
            f"I{stamp}       1 server.go:150] Version: {host.kubernetes.apiserver_version if host.kubernetes else ''}",
            f"I{stamp}       1 secure_serving.go:213] Serving securely on [::]:6443",
            f"I{stamp}       1 controller.go:615] quota admission added evaluator for: leases.coordination.k8s.io",
        ],
        "kube-controller-manager": [
            f"I{stamp}       1 serving.go:386] Generated self-signed cert in-memory",
            f"I{stamp}       1 leaderelection.go:254] attempting to acquire leader lease kube-system/kube-controller-manager...",
        ],
        "kube-scheduler": [
            f"I{stamp}       1 serving.go:386] Generated self-signed cert in-memory",
            f"I{stamp}       1 leaderelection.go:254] attempting to acquire leader lease kube-system/kube-scheduler...",
        ],
        "kube-proxy": [
            f'I{stamp}       1 server_linux.go:66] "Using iptables proxy"',
            f'I{stamp}       1 server.go:677] "Successfully retrieved node IP(s)" IPs=["{host.address}"]',
        ],
        "kube-flannel": [
            f"I{stamp}       1 main.go:211] CLI flags config: --ip-masq=true --kube-subnet-mgr=true",
            f"I{stamp}       1 main.go:543] Found network config - Backend type: vxlan",
        ],
    }
    return lines.get(pod_name, [])


def find_pod_container(host: Host, now: float, container_id: str) -> ContainerView | None:
    """A Kubernetes container by its id (or its pod and name, ``kube-system/kube-apiserver-NODE``)."""
    for view in containers(host, now, cri=True):
        if container_id in (view.info.id, view.info.pod_id, view.info.name):
            return view
    return None


def _klog_time(at: float) -> str:
    return time.strftime("%m%d %H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 1e6):06d}"


# --- sockets ---


def netstat(host: Host, now: float, request: pb.NetstatRequest) -> list[pb.ConnectRecord]:
    """The machine's sockets: what its services listen on, and the connections they keep to each other."""
    listen = pb.ConnectRecord.LISTEN
    established = pb.ConnectRecord.ESTABLISHED
    services = set(host.services)
    records: list[tuple[str, str, int, str, int, int, str]] = [
        ("tcp6", "::", 50000, "::", 0, listen, "apid"),
    ]
    if "trustd" in services:
        records.append(("tcp6", "::", 50001, "::", 0, listen, "trustd"))
    if "etcd" in services:
        records += [
            ("tcp", host.address, 2379, "0.0.0.0", 0, listen, "etcd"),
            ("tcp", host.address, 2380, "0.0.0.0", 0, listen, "etcd"),
            ("tcp", "127.0.0.1", 2379, "0.0.0.0", 0, listen, "etcd"),
        ]
    if "kubelet" in services:
        records += [
            ("tcp6", "::", 10250, "::", 0, listen, "kubelet"),
            ("tcp", "127.0.0.1", 10248, "0.0.0.0", 0, listen, "kubelet"),
        ]
        if host.control_plane:
            records += [
                ("tcp6", "::", 6443, "::", 0, listen, "kube-apiserver"),
                ("tcp", "127.0.0.1", 41234, "127.0.0.1", 2379, established, "kube-apiserver"),
                ("tcp", "127.0.0.1", 2379, "127.0.0.1", 41234, established, "etcd"),
            ]
    records.append(("udp", "0.0.0.0", 68, "0.0.0.0", 0, pb.ConnectRecord.CLOSE, "machined"))
    wanted = request.filter
    pids = {p.command: p.pid for p in processes(host, now)}
    out = []
    for l4, local, lport, remote, rport, state, owner in records:
        if wanted == pb.NetstatRequest.LISTENING and state != listen:
            continue
        if wanted == pb.NetstatRequest.CONNECTED and state == listen:
            continue
        protocols = request.l4proto
        if request.HasField("l4proto") and not getattr(protocols, l4, False):
            continue
        record = pb.ConnectRecord(l4proto=l4, localip=local, localport=lport, remoteip=remote, remoteport=rport,
                                  state=state, inode=int(_seed(host.uuid + owner + str(lport)) * 1e6))  # type: ignore[arg-type]  # fmt: skip
        if request.feature.pid:
            record.process.CopyFrom(pb.ConnectRecord.Process(pid=pids.get(owner, 0), name=owner))
        out.append(record)
    return out
