"""An emulated machine's firmware, as its BMC sets it up: at each power-on it follows the boot override
(a ``Once`` override is spent by that boot) or else the boot order (disk, CD, network), skipping devices
with nothing bootable. The virtual CD boots when it holds an Image Factory ISO
(``…/image/<schematic>/<version>/<platform>-<arch>.iso``): the emulator reads the Talos version and the
schematic from the image's URL instead of fetching it. The network boots nothing (the emulator serves no
PXE)."""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import urlsplit

from herder.emu.bmc.state import BmcState
from herder.emu.machine.firmware import DISK, Boot

_FACTORY_IMAGE = re.compile(
    r"/image/([0-9a-f]{64})/(v\d+\.\d+\.\d+[0-9A-Za-z.\-+]*)/[a-z0-9]+-[a-z0-9]+\.iso$"
)
BOOT_ORDER = ("Hdd", "Cd", "Pxe")


def factory_image(url: str) -> Boot | None:
    """The Talos an Image Factory ISO URL boots, or None for an image the emulator does not know."""
    match = _FACTORY_IMAGE.search(urlsplit(url).path)
    return Boot(talos_version=match.group(2), schematic=match.group(1)) if match else None


class BmcFirmware:
    """The firmware of one machine, reading and spending its BMC's state (saved through ``save``)."""

    def __init__(self, state: BmcState, save: Callable[[], None]) -> None:
        self.state = state
        self._save = save

    def power_on(self, *, installed: bool) -> Boot | None:
        state = self.state
        state.boots += 1
        target = state.override_target if state.override_enabled != "Disabled" else "None"
        if state.override_enabled == "Once":
            state.override_enabled = "Disabled"
        self._save()
        order = BOOT_ORDER if target == "None" else (target, *(d for d in BOOT_ORDER if d != target))
        for device in order:
            if device == "Hdd" and installed:
                return DISK
            if device == "Cd" and state.inserted and (image := factory_image(state.image)) is not None:
                return image
        return None
