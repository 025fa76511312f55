"""The files of an emulated machine that ``talosctl read``, ``list`` and ``usage`` see: a few of ``/etc``
and ``/proc`` (whose contents are made when read, from what ``system`` reports), and the system image's
largest programs, whose bytes are the same on every machine and made once per process.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass

from herder.emu.machine.system import MIB, Host


@dataclass(frozen=True)
class File:
    size: int
    mode: int
    modified: float
    content: Callable[[], bytes] | None
    """None for a directory."""
    link: str = ""

    @property
    def is_dir(self) -> bool:
        return bool(self.mode & _DIR_BIT)


_DIR_BIT = 0o20000000000
_DIR = _DIR_BIT | 0o755
"""Go's os.ModeDir with rwxr-xr-x, as Talos's List reports a directory's mode."""
_SYMLINK = 0o1000000000 | 0o777


@functools.cache
def _binary(name: str, size: int) -> bytes:
    """A program's bytes: an ELF header and the same pseudo-random rest on every machine (made once)."""
    body = random.Random(name).randbytes(size - 64)
    return b"\x7fELF\x02\x01\x01" + b"\x00" * 57 + body


CONFIG_PATH = "/system/state/config.yaml"

BINARIES = {
    "/usr/bin/containerd-shim-runc-v2": 10 * MIB,
    "/usr/bin/runc": 12 * MIB,
}
"""The largest files of the system image ``talosctl read`` can stream, with their sizes."""


def files(
    host: Host,
    now: float,
    *,
    memory_text: str,
    loadavg_text: str,
    cpuinfo_text: str,
    config: bytes | None = None,
) -> dict[str, File]:
    """The files of the machine ``talosctl read``, ``list`` and ``usage`` see, by absolute path. What a file
    holds is made when it is read. ``config`` is the running config, which Talos keeps (and serves to
    ``os:admin``) as ``/system/state/config.yaml``."""
    booted = host.booted_at
    built = booted - 86400 * 30

    def text(value: str, mode: int = 0o644, at: float = booted) -> File:
        data = value.encode()
        return File(len(data), mode, at, lambda: data)

    os_release = (
        f'NAME="Talos"\nID=talos\nVERSION_ID={host.talos_version}\nPRETTY_NAME="Talos ({host.talos_version})"\nHOME_URL="https://www.talos.dev/"\n'
        'BUG_REPORT_URL="https://github.com/siderolabs/talos/issues"\n'
    )
    out: dict[str, File] = {
        "/etc/hostname": text(host.hostname + "\n"),
        "/etc/os-release": text(os_release, at=built),
        "/etc/hosts": text(
            f"127.0.0.1 localhost\n{host.address} {host.hostname}\n::1 localhost ip6-localhost\n"
        ),
        "/etc/resolv.conf": text("nameserver 127.0.0.53\n"),
        "/etc/machine-id": text(host.uuid.replace("-", "") + "\n", 0o444),
        "/proc/meminfo": text(memory_text, 0o444, now),
        "/proc/loadavg": text(loadavg_text, 0o444, now),
        "/proc/cpuinfo": text(cpuinfo_text, 0o444, now),
        "/proc/uptime": text(
            f"{host.uptime(now):.2f} {host.uptime(now) * host.hardware.cpus * 0.9:.2f}\n", 0o444, now
        ),
        "/proc/version": text(
            f"Linux version 6.12.18-talos (@buildkitsandbox) #1 SMP {host.talos_version}\n", 0o444, now
        ),
    }
    if config is not None:
        out[CONFIG_PATH] = File(len(config), 0o600, booted, lambda: config)
    for path, size in BINARIES.items():
        out[path] = File(size, 0o755, built, functools.partial(_binary, path, size))
    out["/usr/bin/containerd"] = File(
        38 * MIB, 0o755, built, functools.partial(_binary, "containerd", 38 * MIB)
    )
    out["/sbin/init"] = File(6, _SYMLINK, built, None, link="/sbin/machined")
    for directory in {p.rsplit("/", 1)[0] or "/" for p in out}:
        while True:
            out.setdefault(directory, File(4096, _DIR, booted, None))
            if directory == "/":
                break
            directory = directory.rsplit("/", 1)[0] or "/"
    for directory in ("/var", "/var/log", "/var/lib", "/system", "/system/state"):
        out.setdefault(directory, File(4096, _DIR, booted, None))
    if "etcd" in host.services:
        out["/var/lib/etcd"] = File(4096, _DIR, booted, None)
        out["/var/lib/etcd/member"] = File(4096, _DIR, booted, None)
    return out
