"""The web UI benchmark runs end to end at a small size (the full size is ``python -m herder.bench web``)."""

from __future__ import annotations

import json

import pytest

from herder.bench import web


@pytest.mark.slow
def test_web_benchmark_small(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--clusters", "5", "--machines", "20", "--renders", "3", "--write-rate", "50", "--seconds", "1"]
    assert web.main(args) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [line["name"] for line in lines] == ["web_clusters_page_render", "web_live_updates"]
    render, live = lines
    assert 0 < render["value"] < 300 and render["clusters"] == 5
    assert live["delivered"] == live["written"] == 50
