"""The upgrades benchmark runs end to end at a small size (the full size is
``python -m herder.bench upgrades --clusters 20``); it shares its fleet with ``herder.bench clusters``."""

from __future__ import annotations

import json

import pytest

from herder.bench import upgrades


@pytest.mark.slow
def test_upgrades_benchmark_small(capsys: pytest.CaptureFixture[str]) -> None:
    assert upgrades.main(["--clusters", "1", "--timeout", "240"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [line["name"] for line in lines] == [
        # The fleet waits for the server's spare keys (one per cluster) before the clock starts.
        "spare_keys_ready_after_start",
        "upgrades_sync_until_all_ready",
        "upgrades_until_all_upgraded",
        "upgrades_store_writes_per_machine",
        "upgrades_reconciles_per_machine",
    ]
    keys, synced, upgraded, writes, reconciles = lines
    assert keys["keys"] == 1 and 0 <= keys["value"] < 240
    assert synced["clusters"] == 1 and 0 < synced["value"] < 240
    # One cluster of three control planes and two workers, every machine moved to the next Talos minor.
    assert upgraded["machines"] == 5 and upgraded["toVersion"] == upgrades.TARGET
    assert upgraded["fromVersion"] != upgraded["toVersion"] and 0 < upgraded["value"] < 240
    # What the upgrade cost per machine: the sums of their parts, bounded; every machine's record and
    # its Machine written again (its version changed), and the upgrade controller at work on each.
    by_kind, by_controller = writes["by_kind"], reconciles["by_controller"]
    assert writes["value"] == pytest.approx(sum(by_kind.values()), abs=0.2)
    assert reconciles["value"] == pytest.approx(sum(by_controller.values()), abs=0.3)
    assert by_kind["ClusterMachine"] >= 1 and by_kind["Machine"] >= 1 and by_controller["TalosUpgrade"] >= 1
    assert 0 < writes["value"] < 150 and 0 < reconciles["value"] < 500
