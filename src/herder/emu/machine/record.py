"""What an emulated machine is, as the emulator persists it: its identity, address, hardware, Talos version,
the configs it holds and its power state. Whatever a real machine keeps on disk is here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Hardware:
    cpus: int = 4
    memory_mib: int = 8192
    manufacturer: str = "QEMU"
    product_name: str = "Standard PC (Q35 + ICH9, 2009)"
    disks: list[dict[str, Any]] = field(
        default_factory=lambda: [{"name": "/dev/sda", "size": 100 << 30, "model": "QEMU HARDDISK"}]
    )


@dataclass
class MachineRecord:
    """What survives a restart of the emulator (and a crash of the machine)."""

    uuid: str
    address: str
    port: int
    talos_version: str
    hardware: Hardware = field(default_factory=Hardware)
    config: bytes | None = None
    staged_config: bytes | None = None
    installed: bool = False
    powered_on: bool = True
    schematic: str = ""
    """The Image Factory schematic of the Talos it runs (booted from an ISO of it), or empty."""
    boots: int = 0
    """How many times its system booted (power-ons and reboots), so a test can tell nothing rebooted it."""
    boot_id: str = ""
    """A new one each boot, as Linux's ``/proc/sys/kernel/random/boot_id``."""
    config_applies: int = 0
    """How many configs it took (in maintenance mode or applied), so a test can tell nothing re-applied one."""

    @property
    def endpoint(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port}"

    def to_json(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "address": self.address,
            "port": self.port,
            "talos_version": self.talos_version,
            "hardware": vars(self.hardware),
            "config": self.config.decode() if self.config is not None else None,
            "staged_config": self.staged_config.decode() if self.staged_config is not None else None,
            "installed": self.installed,
            "powered_on": self.powered_on,
            "schematic": self.schematic,
            "boots": self.boots,
            "boot_id": self.boot_id,
            "config_applies": self.config_applies,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> MachineRecord:
        def blob(key: str) -> bytes | None:
            value = raw.get(key)
            return value.encode() if isinstance(value, str) else None

        return cls(
            uuid=raw["uuid"],
            address=raw["address"],
            port=int(raw["port"]),
            talos_version=raw["talos_version"],
            hardware=Hardware(**raw.get("hardware", {})),
            config=blob("config"),
            staged_config=blob("staged_config"),
            installed=bool(raw.get("installed")),
            powered_on=bool(raw.get("powered_on", True)),
            schematic=str(raw.get("schematic") or ""),
            boots=int(raw.get("boots") or 0),
            boot_id=str(raw.get("boot_id") or ""),
            config_applies=int(raw.get("config_applies") or 0),
        )
