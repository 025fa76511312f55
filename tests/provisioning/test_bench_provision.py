"""The provisioning benchmark runs end to end at a small size (the full size is
``python -m herder.bench provision --requests 1000``)."""

from __future__ import annotations

import json

import pytest

from herder.bench import provision


@pytest.mark.slow
def test_provision_benchmark_small(capsys: pytest.CaptureFixture[str]) -> None:
    assert provision.main(["--requests", "5", "--concurrency", "4", "--timeout", "120"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [line["name"] for line in lines] == [
        "provision_until_all_provisioned",
        "provision_until_all_connected",
        "provision_store_writes_per_request",
        "provision_server_rss",
        "provision_emulator_rss",
        "provision_provider_rss",
    ]
    provisioned, connected, writes, *rss = lines
    # A machine is connected after its request was provisioned, both within the timeout.
    assert provisioned["requests"] == connected["requests"] == 5
    assert 0 < provisioned["value"] <= connected["value"] < 120
    # Writes per request: the sum of those of each kind, a bounded number, and each request and its
    # machine written at least once.
    by_kind = writes["by_kind"]
    assert writes["value"] == pytest.approx(sum(by_kind.values()), abs=0.1)
    assert by_kind["MachineRequest"] >= 1 and by_kind["Machine"] >= 1
    assert 0 < writes["value"] < 50
    # Each process of a small run in a bounded amount of memory.
    assert [r["unit"] for r in rss] == ["MiB"] * 3 and all(0 < r["value"] < 500 for r in rss)
    assert rss[1]["machines"] == 5
