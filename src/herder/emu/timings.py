"""How long each stage of an emulated machine takes: fast by default (tests, benchmarks), realistic for demos."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Timings:
    """Seconds spent in each step of the Talos lifecycle."""

    boot: float = 0.05
    install: float = 0.1
    reboot: float = 0.05
    upgrade: float = 0.1
    reset: float = 0.05
    shutdown: float = 0.05
    slow_boot: float = 3.0
    """How long a boot takes on a machine with the ``slow-boot`` fault."""
    try_timeout: float = 60.0
    """How long a config applied in TRY mode lasts when the caller gives no timeout (Talos: 1 minute)."""
    siderolink_keepalive: float = 1.0
    """Seconds between a joined machine's WireGuard keepalives to herder (Talos: 25)."""
    join_retry: float = 1.0
    """Seconds before a machine whose join failed tries again."""

    @classmethod
    def named(cls, name: str) -> Timings:
        if name == "fast":
            return cls()
        if name == "realistic":
            return cls(
                boot=20,
                install=45,
                reboot=10,
                upgrade=60,
                reset=15,
                shutdown=5,
                slow_boot=300,
                siderolink_keepalive=25,
                join_retry=10,
            )
        raise ValueError(f"unknown timings {name!r}: expected fast or realistic")

    def with_overrides(self, overrides: dict[str, float]) -> Timings:
        """These timings with some steps changed (``{"boot": 2}``); unknown step names are refused."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise ValueError(
                f"unknown timing {', '.join(unknown)}: expected one of {', '.join(sorted(names))}"
            )
        return dataclasses.replace(self, **overrides)
