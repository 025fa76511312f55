"""What an emulated machine's firmware boots when the machine is powered on (a cold boot: Talos's own
reboots kexec into the installed system and never go back to the firmware). A machine without firmware
boots as the emulator's cloud machines do: its Talos, installed or not; one with firmware (a BMC's,
``herder.emu.bmc``) boots what the firmware picks: the installed system, a Talos image on a medium, or
nothing at all."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Boot:
    """What the firmware boots: a Talos image on a medium (its version and Image Factory schematic), or
    with neither, the system installed on the disk."""

    talos_version: str = ""
    schematic: str = ""

    @property
    def from_disk(self) -> bool:
        return not self.talos_version


DISK = Boot()


class Firmware(Protocol):
    def power_on(self, *, installed: bool) -> Boot | None:
        """The power-on self test: what to boot (None: no bootable device)."""
        ...
