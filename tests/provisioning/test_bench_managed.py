"""The managed control planes benchmark runs end to end at a small size (the full size is
``python -m herder.bench managed --clusters 50``)."""

from __future__ import annotations

import json

import pytest

from herder.bench import managed


@pytest.mark.slow
def test_managed_benchmark_small(capsys: pytest.CaptureFixture[str]) -> None:
    assert managed.main(["--clusters", "1", "--concurrency", "4", "--timeout", "120"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [line["name"] for line in lines] == ["managed_until_all_ready", "managed_store_writes_per_machine"]
    ready, writes = lines
    # One cluster of a managed xs control plane (one machine) and two workers, Ready within the timeout.
    assert ready["unit"] == "s" and ready["clusters"] == 1 and ready["machines"] == 3
    assert 0 < ready["value"] < 120
    # Writes per machine: the sum of those of each kind, a bounded number; each machine got its config
    # generated and written once, and its Machine and ClusterMachine at least once.
    by_kind = writes["by_kind"]
    assert writes["value"] == pytest.approx(sum(by_kind.values()), abs=0.2)
    assert by_kind["ClusterMachineConfig"] == pytest.approx(1.0)
    assert by_kind["Machine"] >= 1 and by_kind["ClusterMachine"] >= 1
    assert 0 < writes["value"] < 150
