"""The clusters benchmark runs end to end at a small size (the full size is
``python -m herder.bench emu --clusters 100``)."""

from __future__ import annotations

import json
import os

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
    rss, ready, generation = lines
    # Two clusters of three control planes and two workers each: ten machines, in little memory.
    assert rss["unit"] == "MiB" and rss["clusters"] == 2 and rss["machines"] == 10 and 0 < rss["value"] < 300
    # Every cluster's etcd healthy within the timeout; the configs made on every core.
    assert (
        ready["unit"] == "s"
        and ready["clusters"] == 2
        and ready["in_flight"] == 4
        and 0 < ready["value"] < 120
    )
    assert generation["cores"] == os.cpu_count() and 0 < generation["value"] < 120
