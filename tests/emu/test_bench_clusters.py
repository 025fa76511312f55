"""The clusters benchmark runs end to end at a small size (the full size is
``python -m herder.bench emu --clusters 100``)."""

from __future__ import annotations

import json

import pytest

from herder.bench import emu


@pytest.mark.slow
def test_emu_clusters_benchmark_small(capsys: pytest.CaptureFixture[str]) -> None:
    assert emu.main(["--clusters", "2", "--in-flight", "4", "--timeout", "120"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [line["name"] for line in lines] == [
        "emu_clusters_rss",
        "emu_clusters_until_all_ready",
        "emu_clusters_config_generation",
    ]
    assert all(line["value"] > 0 for line in lines)
