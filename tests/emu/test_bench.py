"""The emulator benchmark runs end to end at a small size (the full size is ``python -m herder.bench emu``)."""

from __future__ import annotations

import json

import pytest

from herder.bench import emu


@pytest.mark.slow
def test_emu_benchmark_small(capsys: pytest.CaptureFixture[str]) -> None:
    assert emu.main(["--machines", "6", "--in-flight", "3", "--timeout", "120"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [line["name"] for line in lines] == [
        "emu_rss",
        "emu_all_answer_version",
        "emu_apply_until_all_running",
    ]
    assert all(line["value"] > 0 for line in lines)
