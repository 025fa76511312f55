"""An emulated machine's logs as machined keeps them in memory: one bounded buffer per service (machined,
apid, etcd, kubelet…), written when the machine does something (it boots, takes a config, bootstraps or
joins etcd, registers its kubelet), and the kernel's ring buffer, whose boot messages are made when first
read (from the machine's hardware and boot time) rather than at every boot of every machine.

Readers take the last lines and follow new ones, as ``talosctl logs -f --tail N`` and ``talosctl dmesg -f``
do. A reboot starts every buffer afresh, as on Talos.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from herder.emu.machine.record import Hardware

LINES = 1000
"""Lines kept per service (Talos keeps a bounded buffer per service too)."""

KERNEL = "kernel"
CHUNK_LINES = 256
"""Lines of a log sent in one message at most."""


@dataclass(frozen=True)
class LogLine:
    at: float
    text: str
    facility: str = "kern"
    priority: str = "info"


class LogBuffer:
    """The recent lines of one log, and its followers."""

    def __init__(self, lines: int = LINES) -> None:
        self._lines: deque[LogLine] = deque(maxlen=lines)
        self._followers: set[asyncio.Queue[LogLine | None]] = set()

    def write(self, line: LogLine) -> None:
        self._lines.append(line)
        for queue in self._followers:
            queue.put_nowait(line)

    def end(self) -> None:
        """The log starts afresh (a reboot): followers are ended."""
        self._lines.clear()
        for queue in self._followers:
            queue.put_nowait(None)

    def tail(self, lines: int) -> list[LogLine]:
        """The last ``lines`` lines (all of them for a negative number)."""
        kept = list(self._lines)
        return kept if lines < 0 else kept[len(kept) - lines :] if lines else []

    async def follow(self, *, tail: int) -> AsyncIterator[LogLine]:
        """The last ``tail`` lines, then new ones until the log ends or the caller stops."""
        queue: asyncio.Queue[LogLine | None] = asyncio.Queue()
        self._followers.add(queue)
        try:
            for line in self.tail(tail):
                yield line
            while (live := await queue.get()) is not None:
                yield live
        finally:
            self._followers.discard(queue)

    async def follow_chunks(self, *, tail: int, lines: int = CHUNK_LINES) -> AsyncIterator[list[LogLine]]:
        """``follow``'s lines in chunks, as Talos streams a log file: the backlog ``lines`` at a time, then
        whatever was written since the last chunk."""
        queue: asyncio.Queue[LogLine | None] = asyncio.Queue()
        self._followers.add(queue)
        try:
            backlog = self.tail(tail)
            for start in range(0, len(backlog), lines):
                yield backlog[start : start + lines]
            while (live := await queue.get()) is not None:
                chunk = [live]
                while not queue.empty() and len(chunk) < lines:
                    more = queue.get_nowait()
                    if more is None:
                        yield chunk
                        return
                    chunk.append(more)
                yield chunk
        finally:
            self._followers.discard(queue)


class MachineLogs:
    """Every log of one machine: its services' and its kernel's."""

    def __init__(self, boot_messages: Callable[[float], list[LogLine]]) -> None:
        """``boot_messages(booted_at)``: what the kernel said while it booted, made when first read."""
        self._services: dict[str, LogBuffer] = {}
        self._kernel: LogBuffer | None = None
        self._boot_messages = boot_messages
        self._booted_at = 0.0

    def boot(self, at: float) -> None:
        """A new boot: every log starts afresh."""
        for buffer in self._services.values():
            buffer.end()
        self._services.clear()
        if self._kernel is not None:
            self._kernel.end()
        self._kernel = None
        self._booted_at = at

    def write(self, service: str, message: str, *, at: float | None = None) -> None:
        """A line of the service's log, in the form that service writes its lines."""
        moment = time.time() if at is None else at
        line = LogLine(moment, _styled(service, message, moment))
        self.buffer(service).write(line)
        if service == "machined" and self._kernel is not None:
            self._kernel.write(_to_kernel(line))

    def service(self, name: str) -> LogBuffer | None:
        return self._services.get(name)

    def buffer(self, name: str) -> LogBuffer:
        """The service's log, made empty if it has said nothing yet (a follower then waits for its first
        line)."""
        buffer = self._services.get(name)
        if buffer is None:
            buffer = self._services[name] = LogBuffer()
        return buffer

    def services(self) -> list[str]:
        return sorted(self._services)

    def kernel(self) -> LogBuffer:
        if self._kernel is None:
            self._kernel = LogBuffer(lines=LINES * 2)
            machined = self._services.get("machined")
            said = [_to_kernel(line) for line in machined.tail(-1)] if machined is not None else []
            for line in sorted([*self._boot_messages(self._booted_at), *said], key=lambda line: line.at):
                self._kernel.write(line)
        return self._kernel


def _styled(service: str, message: str, at: float) -> str:
    """``message`` as each program writes its log lines: machined with its ``[talos]`` prefix, Go's log for
    apid and trustd, JSON for etcd, klog for the kubelet, logfmt for containerd."""
    moment = datetime.fromtimestamp(at, UTC)
    if service == "machined":
        return f"[talos] {moment:%Y/%m/%d %H:%M:%S} {message}"
    if service == "etcd":
        iso = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
        return json.dumps({"level": "info", "ts": iso, "caller": "etcdserver/server.go:2051", "msg": message})
    if service == "kubelet":
        return f"I{moment:%m%d %H:%M:%S}.{moment.microsecond:06d}    2041 kubelet.go:2412] {message}"
    if service in ("containerd", "cri"):
        return f'time="{moment:%Y-%m-%dT%H:%M:%S}.{moment.microsecond:06d}Z" level=info msg={json.dumps(message)}'
    return f"{moment:%Y/%m/%d %H:%M:%S} {message}"


def _to_kernel(line: LogLine) -> LogLine:
    """machined's line as it writes it to the kernel's log too (so it shows in dmesg, as on Talos)."""
    return LogLine(line.at, line.text, "user", "warning")


def timestamp(at: float) -> str:
    """RFC 3339 with nanoseconds, as Talos prints a kernel message's time."""
    moment = datetime.fromtimestamp(at, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond:06d}000Z"


def dmesg_line(line: LogLine) -> bytes:
    """A kernel message as machined's Dmesg sends it: ``facility: priority: [time]: message``."""
    return f"{line.facility}: {line.priority:>7}: [{timestamp(line.at)}]: {line.text}".encode()


def boot_messages(hardware: Hardware, address: str, talos_version: str, booted_at: float) -> list[LogLine]:
    """What the kernel says as the machine boots, as ``talosctl dmesg`` shows it after boot."""
    memory_kib = hardware.memory_mib * 1024
    disks = [(str(d["name"]).removeprefix("/dev/"), int(d["size"])) for d in hardware.disks]
    said: list[tuple[float, str, str]] = [
        (0.0, "notice", f"Linux version 6.12.18-talos (@buildkitsandbox) (gcc (GCC) 14.2.0, GNU ld (GNU Binutils) "
                        f"2.44) #1 SMP {talos_version}"),
        (0.0, "info", "Command line: talos.platform=metal console=ttyS0 init_on_alloc=1 slab_nomerge pti=on "
                      "consoleblank=0 nvme_core.io_timeout=4294967295 printk.devkmsg=on selinux=1"),
        (0.0, "info", f"DMI: {hardware.manufacturer} {hardware.product_name}, BIOS 1.16.3-debian-1.16.3-2 04/01/2014"),
        (0.0, "info", "Hypervisor detected: KVM"),
        (0.01, "info", f"smpboot: Allowing {hardware.cpus} CPUs, 0 hotplug CPUs"),
        (0.02, "info", f"Memory: {memory_kib - 180_000}K/{memory_kib}K available (20480K kernel code, "
                       "3000K rwdata, 9000K rodata, 4000K init, 6000K bss, 180000K reserved)"),
        (0.05, "info", f"smp: Brought up 1 node, {hardware.cpus} CPUs"),
        (0.3, "info", "clocksource: Switched to clocksource kvm-clock"),
        (0.6, "info", "virtio_net virtio0 eth0: renamed from ens3"),
    ]  # fmt: skip
    for index, (name, size) in enumerate(disks):
        sectors = size // 512
        said.append((0.7 + index * 0.01, "notice",
                     f"sd 0:0:{index}:0: [{name}] {sectors} 512-byte logical blocks: ({size / 1e9:.1f} GB/"
                     f"{size / 2**30:.0f} GiB)"))  # fmt: skip
    said += [
        (0.9, "info", "Freeing unused kernel image (initmem) memory: 4000K"),
        (0.9, "info", "Run /init as init process"),
        (1.2, "notice", "random: crng init done"),
        (2.1, "info", f"IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready ({address})"),
        (2.4, "info", "XFS (" + (disks[0][0] if disks else "sda") + "4): Mounting V5 Filesystem"),
        (2.5, "info", "XFS (" + (disks[0][0] if disks else "sda") + "4): Ending clean mount"),
    ]
    return [LogLine(booted_at + offset, text, "kern", priority) for offset, priority, text in said]
