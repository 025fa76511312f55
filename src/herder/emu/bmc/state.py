"""What an emulated BMC keeps for its machine (persisted, as a BMC keeps it in its own flash): the boot
override (target and how long it holds), the virtual CD (the image URL, inserted or not) and how many
times it has booted the machine."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol

TARGETS = ("None", "Pxe", "Cd", "Hdd")
"""Boot override targets: none (the boot order), the network, the virtual CD, the disk."""
ENABLED = ("Disabled", "Once", "Continuous")


@dataclass
class BmcState:
    override_target: str = "None"
    override_enabled: str = "Disabled"
    image: str = ""
    """The URL of the image in the virtual CD, or empty."""
    inserted: bool = False
    write_protected: bool = True
    boots: int = 0
    """Power-on self tests run: each time the machine was powered on or reset."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> BmcState:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})


class BmcStore(Protocol):
    """Where BMC states are persisted (the emulator's data directory)."""

    def save_bmc(self, uuid: str, state: dict[str, Any]) -> None: ...

    def delete_bmc(self, uuid: str) -> None: ...
