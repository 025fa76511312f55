"""The gateway benchmark runs end to end with one read each way (``python -m herder.bench gateway`` reads
more): its line is a rate through the gateway, against the rate straight from the machine."""

from __future__ import annotations

import json

import pytest

from herder.bench import gateway


@pytest.mark.slow
def test_gateway_benchmark_small(capsys: pytest.CaptureFixture[str]) -> None:
    assert gateway.main(["--reads", "1", "--timeout", "240"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    (rate,) = [line for line in lines if line["name"] == "gateway.relay.rate"]
    assert rate["unit"] == "bytes/s" and rate["size"] == 10 << 20
    # Megabytes a second both ways (a 10 MiB read takes well under the timeout), and the ratio is theirs.
    assert rate["value"] > 1e6 and rate["baseline"] > 1e6
    assert rate["ratio"] == pytest.approx(rate["value"] / rate["baseline"], rel=0.01)
