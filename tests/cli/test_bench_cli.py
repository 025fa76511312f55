"""The command line benchmark runs end to end with one run of each command (the full one is
``python -m herder.bench cli``)."""

from __future__ import annotations

import json

import pytest

from herder.bench import cli


@pytest.mark.slow
def test_cli_benchmark_small(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--runs", "1"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [line["name"] for line in lines] == [
        "cli.get.wall_s",
        "cli.help.wall_s",
        "cli.describe.wall_s",
        "cli.apply.wall_s",
        "cli.cluster_kubeconfig.wall_s",
    ]
    for line in lines:
        # A wall time of a process that started and talked to a server, against kubectl's in the same run;
        # the ratio is kubectl's time over herder's (higher is better).
        assert line["unit"] == "s" and line["runs"] == 1 and line["goal_max"] == 0.2
        assert 0.01 < line["value"] < 30 and 0.001 < line["baseline"] < 30
        assert line["ratio"] == pytest.approx(line["baseline"] / line["value"], abs=0.01)
