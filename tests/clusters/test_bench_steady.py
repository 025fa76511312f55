"""The steady-state benchmark runs end to end at a small size (the full size is
``python -m herder.bench steady --clusters 1000``): formed clusters left alone cost little."""

from __future__ import annotations

import json

import pytest

from herder.bench import steady


@pytest.mark.slow
def test_steady_benchmark_small(capsys: pytest.CaptureFixture[str]) -> None:
    assert steady.main(["--clusters", "2", "--timeout", "240", "--settle", "5", "--window", "10"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [line["name"] for line in lines] == [
        "spare_keys_ready_after_start",
        "steady.spare_keys_made_again_after",
        "steady.cpu_percent",
        "steady.rss_mib",
        "steady.writes_per_minute",
        "steady.talos_calls_per_minute",
        "steady.emulator_rss_mib",
    ]
    assert lines[1]["keys"] == 2 and lines[1]["unit"] == "s"
    measured = {line["name"]: line for line in lines[2:]}
    assert all(line["clusters"] == 2 and line["value"] >= 0 for line in measured.values())
    assert [measured[n]["unit"] for n in measured] == ["%", "MiB", "writes/min", "calls/min", "MiB"]
    assert isinstance(measured["steady.cpu_percent"]["reconciles_per_minute"], dict)
    assert 0 < measured["steady.rss_mib"]["value"] < 2048
    assert 0 < measured["steady.emulator_rss_mib"]["value"] < 2048
    # Nothing changed, so nothing is written: well under the goal of one write per cluster a minute.
    writes = measured["steady.writes_per_minute"]
    assert writes["value"] == pytest.approx(sum(writes["by_kind"].values()), abs=0.5)
    assert writes["value"] < 2
    # Following the machines still asks them something, but a probe is not a call a second.
    assert 0 < measured["steady.talos_calls_per_minute"]["value"] < 2 * 60
