"""Fixtures shared by the emulator and machine API tests: an emulator with a few machines (stopped even
when a test fails) and the configs of two clusters."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from herder.emu.control.emulator import Emulator
from tests.emu.support import ClusterConfigs, cluster_configs, running_emulator


@pytest.fixture
async def emulator(tmp_path: Path) -> AsyncIterator[Emulator]:
    async with running_emulator(tmp_path / "emu", 4) as emu:
        yield emu


@pytest.fixture
def cluster_a() -> ClusterConfigs:
    return cluster_configs("alpha")


@pytest.fixture
def cluster_b() -> ClusterConfigs:
    return cluster_configs("bravo")
