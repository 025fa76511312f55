"""The emulator benchmark runs end to end at a small size (the full size is ``python -m herder.bench emu``)."""

from __future__ import annotations

import json
import os

import pytest

from herder.bench import emu


@pytest.mark.slow
def test_emu_benchmark_small(capsys: pytest.CaptureFixture[str]) -> None:
    assert emu.main(["--machines", "6", "--in-flight", "3", "--timeout", "120"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [line["name"] for line in lines] == [
        "emu_rss",
        "emu_all_answer_version",
        "emu_apply_until_all_running",
    ]
    rss, answered, running = lines
    # Memory: a few machines are far below the goal set for a thousand.
    assert rss["unit"] == "MiB" and rss["machines"] == 6 and 0 < rss["value"] < rss["goal_max"]
    # Times: within the run's timeout, and the emulator's CPU time no more than the wall time allows.
    cores = os.cpu_count() or 1
    assert answered["unit"] == "s" and answered["machines"] == 6 and 0 < answered["value"] < 120
    assert 0 < answered["emulator_cpu_s"] <= answered["value"] * cores
    assert running["in_flight"] == 3 and 0 < running["value"] < 120
    assert 0 <= running["emulator_cpu_s"] <= running["value"] * cores
