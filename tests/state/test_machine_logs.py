"""The machine log rings on a real file system: bounded per machine, scoped by cluster, kept across a
reopen (a restart of the server), followed live, and removed once a machine is long gone."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from herder.state import machine_logs
from herder.state.machine_logs import KERNEL, MIN_BUDGET, LogScope, MachineLogs

UUID = "6c8f1a2e-1111-4a4a-8b8b-000000000001"
ALPHA = LogScope("default", "alpha")
BETA = LogScope("default", "beta")


def everything(_scope: LogScope) -> bool:
    return True


def test_lines_come_back_in_order_per_source_with_tail_and_since(tmp_path: Path) -> None:
    logs = MachineLogs(tmp_path)
    logs.append(UUID, ALPHA, "kubelet", ["one", "two\twith a tab", "three\\n not a newline"], at=100.0)
    logs.append(UUID, ALPHA, "etcd", ["etcd up"], at=101.0)
    logs.append(UUID, ALPHA, KERNEL, ["Linux version 6.12"], at=102.0)
    logs.append(UUID, ALPHA, "kubelet", ["four"], at=103.0)

    kubelet = logs.entries("default", UUID, allowed=everything, sources=["kubelet"])
    assert [e.text for e in kubelet] == ["one", "two\twith a tab", "three\\n not a newline", "four"]
    # Every service's, the kernel's left out; the kernel's alone.
    assert [e.source for e in logs.entries("default", UUID, allowed=everything)] == ["kubelet"] * 3 + [
        "etcd",
        "kubelet",
    ]
    assert [e.text for e in logs.entries("default", UUID, allowed=everything, sources=[KERNEL])] == [
        "Linux version 6.12"
    ]
    assert [e.text for e in logs.entries("default", UUID, allowed=everything, tail=2)] == ["etcd up", "four"]
    assert logs.entries("default", UUID, allowed=everything, tail=0) == []
    assert [e.text for e in logs.entries("default", UUID, allowed=everything, since=101.0)] == [
        "etcd up",
        "four",
    ]


def test_a_ring_keeps_to_its_budget_dropping_the_oldest_lines(tmp_path: Path) -> None:
    logs = MachineLogs(tmp_path, MIN_BUDGET)
    line = "x" * 200
    for i in range(5000):  # about 1 MiB written into a ring of 256 KiB
        logs.append(UUID, ALPHA, "kubelet", [f"{i:05d} {line}"], at=float(i))
    on_disk = sum(p.stat().st_size for p in (tmp_path / "default" / UUID).iterdir())
    assert MIN_BUDGET * 7 // 8 <= on_disk <= MIN_BUDGET
    kept = logs.entries("default", UUID, allowed=everything)
    assert kept[-1].text.startswith("04999 ")
    numbers = [int(e.text[:5]) for e in kept]
    assert numbers == list(range(numbers[0], 5000))  # the newest, without a gap
    assert numbers[0] > 3000


def test_a_large_batch_is_spread_over_segments_within_the_budget(tmp_path: Path) -> None:
    logs = MachineLogs(tmp_path, MIN_BUDGET)
    logs.append(UUID, ALPHA, "kubelet", [f"{i:05d} " + "y" * 300 for i in range(3000)], at=1.0)
    on_disk = sum(p.stat().st_size for p in (tmp_path / "default" / UUID).iterdir())
    assert on_disk <= MIN_BUDGET
    assert logs.entries("default", UUID, allowed=everything)[-1].text.startswith("02999 ")


def test_lines_are_kept_by_the_scope_they_were_written_in(tmp_path: Path) -> None:
    logs = MachineLogs(tmp_path)
    logs.append(UUID, ALPHA, "kubelet", ["in alpha"], at=1.0)
    logs.append(UUID, LogScope("default"), "machined", ["reset: in maintenance"], at=2.0)
    logs.append(UUID, BETA, "kubelet", ["in beta"], at=3.0)
    alpha_only = logs.entries("default", UUID, allowed=lambda s: s.cluster == "alpha")
    assert [e.text for e in alpha_only] == ["in alpha"]
    assert logs.scopes("default", UUID) == [ALPHA, LogScope("default"), BETA]


def test_a_reopened_store_has_every_line_and_remembers_the_last_ones_of_each_log(tmp_path: Path) -> None:
    logs = MachineLogs(tmp_path)
    logs.append(UUID, ALPHA, "kubelet", ["a", "b", "c", "d"], at=1.0)
    logs.append(UUID, ALPHA, "etcd", ["e"], at=2.0)
    logs.close()
    again = MachineLogs(tmp_path)
    assert again.recent("default", UUID, "kubelet") == ["b", "c", "d"]
    assert again.recent("default", UUID, "etcd") == ["e"]
    assert again.recent("default", UUID, "trustd") == []
    again.append(UUID, ALPHA, "kubelet", ["f"], at=3.0)
    assert [e.text for e in again.entries("default", UUID, allowed=everything)] == [
        "a",
        "b",
        "c",
        "d",
        "e",
        "f",
    ]
    assert again.machines() == [("default", UUID)]


def test_a_torn_last_line_is_not_read(tmp_path: Path) -> None:
    logs = MachineLogs(tmp_path)
    logs.append(UUID, ALPHA, "kubelet", ["whole"], at=1.0)
    logs.close()
    (segment,) = (tmp_path / "default" / UUID).iterdir()
    with segment.open("ab") as f:
        f.write(b"2.0\tkubelet\thalf a li")  # a crash in the middle of a write
    assert [e.text for e in MachineLogs(tmp_path).entries("default", UUID, allowed=everything)] == ["whole"]


async def test_a_follower_gets_the_backlog_then_new_lines_of_its_scopes_only(tmp_path: Path) -> None:
    logs = MachineLogs(tmp_path)
    logs.append(UUID, ALPHA, "kubelet", ["old"], at=1.0)
    seen: list[str] = []

    async def follow() -> None:
        async for entry in logs.follow(
            "default", UUID, allowed=lambda s: s.cluster == "alpha", sources=["kubelet"]
        ):
            seen.append(entry.text)
            if len(seen) == 3:
                return

    task = asyncio.create_task(follow())
    for _ in range(100):
        if seen:
            break
        await asyncio.sleep(0.01)
    logs.append(UUID, ALPHA, "etcd", ["not kubelet"])
    logs.append(UUID, BETA, "kubelet", ["another cluster's"])
    logs.append(UUID, ALPHA, "kubelet", ["new", "newer"])
    await asyncio.wait_for(task, 5)
    assert seen == ["old", "new", "newer"]


def test_the_logs_of_a_machine_long_gone_are_removed(tmp_path: Path) -> None:
    logs = MachineLogs(tmp_path, keep_gone=3600)
    logs.append(UUID, ALPHA, "kubelet", ["bye"])
    other = "6c8f1a2e-1111-4a4a-8b8b-000000000002"
    logs.append(other, ALPHA, "kubelet", ["still here"])
    assert logs.prune({("default", other)}) == []  # gone, but recently: kept
    assert logs.prune({("default", other)}, now=time.time() + 7200) == [("default", UUID)]
    assert logs.machines() == [("default", other)]


def test_names_that_are_no_machine_are_refused(tmp_path: Path) -> None:
    logs = MachineLogs(tmp_path)
    with pytest.raises(ValueError):
        logs.append("..", ALPHA, "kubelet", ["x"])
    with pytest.raises(ValueError, match="at least"):
        MachineLogs(tmp_path, 1000)


def test_only_the_rings_written_last_hold_an_open_file_and_the_others_go_on_in_their_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(machine_logs, "OPEN_FILES", 2)
    logs = MachineLogs(tmp_path)
    machines = [f"6c8f1a2e-1111-4a4a-8b8b-00000000000{i}" for i in range(4)]
    for i, uuid in enumerate(machines):
        logs.append(uuid, ALPHA, "kubelet", [f"first of {i}"], at=100.0 + i)
    fds = os.listdir("/proc/self/fd")
    assert sum(1 for fd in fds if os.path.realpath(f"/proc/self/fd/{fd}").startswith(str(tmp_path))) == 2
    # The first machine's file was closed for room: its next line goes on in the same segment.
    logs.append(machines[0], ALPHA, "kubelet", ["second of 0"], at=110.0)
    assert len(list((tmp_path / "default" / machines[0]).glob("*.log"))) == 1
    logs.close()
    again = MachineLogs(tmp_path)
    assert [e.text for e in again.entries("default", machines[0], allowed=everything)] == [
        "first of 0",
        "second of 0",
    ]
