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
    assert all(line["value"] > 0 for line in lines)
