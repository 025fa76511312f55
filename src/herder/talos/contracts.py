"""Talos version contracts: which config format a Talos version speaks.

A cluster keeps the contract of the Talos version it was created with (an upgrade never rewrites the
config format under a running machine), so the contract, not the running version, picks the generator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+][0-9A-Za-z.\-+]*)?$")


class UnknownTalosVersion(ValueError):
    """A Talos version that is malformed or outside the supported contracts."""


@dataclass(frozen=True, order=True)
class VersionContract:
    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    @classmethod
    def parse(cls, version: str) -> VersionContract:
        """The contract of ``1.9``, ``v1.9.3`` or ``1.15.0-alpha.1``; refuses unsupported ones."""
        m = _VERSION.match(version.strip())
        if not m:
            raise UnknownTalosVersion(f"invalid Talos version {version!r}: expected X.Y or vX.Y.Z")
        contract = cls(int(m.group(1)), int(m.group(2)))
        if contract not in SUPPORTED:
            supported = ", ".join(str(c) for c in SUPPORTED)
            raise UnknownTalosVersion(
                f"unsupported Talos version {version!r}: supported contracts are {supported}"
            )
        return contract

    def at_least(self, major: int, minor: int) -> bool:
        return (self.major, self.minor) >= (major, minor)


SUPPORTED: tuple[VersionContract, ...] = tuple(VersionContract(1, m) for m in range(9, 16))
LATEST = SUPPORTED[-1]
