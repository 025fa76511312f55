"""What an emulator is started with (data directory, machine count, addresses, Talos version, stage
timings) and the faults it can inject: light enough for the CLI to import without the emulator."""

from __future__ import annotations

import random
import socket
from dataclasses import dataclass, field
from pathlib import Path

from herder.emu.timings import Timings
from herder.state.free_ports import claim

DEFAULT_TALOS_VERSION = "v1.13.9"
DEFAULT_MACHINE_CIDR = "127.100.0.0/16"
DEFAULT_MACHINE_PORT = 50000


def spare_network() -> str:
    """A random /16 of 127.0.0.0/8 for an emulator run beside others (the benchmarks'): never the default
    network, which a user's ``herder demo`` or ``herder emu run`` holds, nor one another picker has just
    taken (``claim``) or an emulator serves (its first machine's address is in use)."""
    default = int(DEFAULT_MACHINE_CIDR.split(".")[1])
    spare = [n for n in range(64, 251) if n != default]
    for _ in range(100):
        second = random.choice(spare)
        if claim(f"network-127.{second}") and listenable(f"127.{second}.0.1", DEFAULT_MACHINE_PORT):
            return f"127.{second}.0.0/16"
    raise RuntimeError("no spare /16 of 127.0.0.0/8 for the emulator's machines")


def listenable(host: str, port: int) -> bool:
    """Whether ``host:port`` can be listened on, as a machine's listener will (reusing an address in
    TIME_WAIT): False where an emulator serves already."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
        return True


FAULTS = ("crash", "partition", "heal", "slow-boot", "fail-upgrade", "fail-install", "vanish")
"""Faults a machine can be given; ``crash``, ``heal`` and ``vanish`` (the machine is destroyed, as a cloud
would behind herder's back) are actions, the others last until ``heal``."""

CLOUD_OPERATIONS = ("create", "destroy", "power")
"""What an infra provider asks of the emulator as of a cloud, each of which can be made to fail."""


@dataclass(frozen=True)
class BmcOptions:
    """Emulated BMCs (``--bmc``): where their Redfish service listens, and its one account."""

    host: str = "127.0.0.1"
    port: int = 0
    username: str = "admin"
    password: str = "password"


@dataclass
class EmulatorOptions:
    data_dir: Path
    machines: int = 0
    """At least this many machines exist once started (persisted ones count)."""
    machine_cidr: str = DEFAULT_MACHINE_CIDR
    machine_port: int = DEFAULT_MACHINE_PORT
    talos_version: str = DEFAULT_TALOS_VERSION
    timings: Timings = field(default_factory=Timings)
    bmc: BmcOptions | None = None
    """With BMCs, the machines made at start are bare metal: powered off, with no OS, each with a BMC."""
    join: str = ""
    """Kernel arguments with ``siderolink.api=…?jointoken=…``: every machine joins herder over SideroLink
    (``herder emu run --join``), each in a network namespace of its own."""
