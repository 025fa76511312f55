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
    assert all(line["value"] > 0 for line in lines)
