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
    assert all(line["value"] > 0 for line in lines)
    assert lines[2]["toVersion"] == upgrades.TARGET
    assert lines[0]["keys"] == 1
