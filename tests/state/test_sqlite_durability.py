"""SQLite keeps every acknowledged write across a kill -9, and refuses a second process on one file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from herder.resources.catalog import herder_registry
from herder.state.errors import Unavailable
from herder.state.sqlite import SQLiteBackend
from herder.state.store import Store

WRITER = """
import asyncio, sys
from herder.resources import Resource
from herder.resources.catalog import herder_registry
from herder.state.sqlite import SQLiteBackend
from herder.state.store import Store

async def main(path):
    store = await Store(await SQLiteBackend(path).open(), herder_registry()).start()
    await store.create(Resource.model_validate({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}))
    i = 0
    while True:
        name = f"p{i:06d}"
        await store.create(Resource.model_validate({
            "apiVersion": "herder.dev/v1alpha1", "kind": "ConfigPatch",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"data": "x" * 900}}))
        print(name, flush=True)  # acknowledged
        i += 1

asyncio.run(main(sys.argv[1]))
"""


async def test_kill_9_loses_no_acknowledged_write(tmp_path: Path) -> None:
    path = tmp_path / "herder.db"
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    acknowledged: list[str] = []
    try:
        assert child.stdout is not None
        deadline = time.monotonic() + 60
        while len(acknowledged) < 300 and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            acknowledged.append(line.strip())
        os.kill(child.pid, signal.SIGKILL)
        # Whatever the pipe still holds was printed, so acknowledged, before the kill.
        acknowledged += [line.strip() for line in child.stdout.read().splitlines() if line.strip()]
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
    assert len(acknowledged) >= 300, "the writer did not get going"
    store = Store(await SQLiteBackend(path).open(), herder_registry())
    try:
        names = {o.name for o in (await store.list("configpatches")).items}
    finally:
        await store.close()
    missing = [n for n in acknowledged if n not in names]
    assert not missing, f"{len(missing)} acknowledged writes lost, first {missing[:3]}"


async def test_second_process_cannot_open_the_same_file(tmp_path: Path) -> None:
    first = await SQLiteBackend(tmp_path / "h.db").open()
    try:
        code = (
            "import asyncio, sys\n"
            "from herder.state.sqlite import SQLiteBackend\n"
            f"asyncio.run(SQLiteBackend({str(tmp_path / 'h.db')!r}).open())\n"
        )
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0
        assert "in use by another process" in proc.stderr
    finally:
        await first.close()
    with pytest.raises(Unavailable):
        second = await SQLiteBackend(tmp_path / "h.db").open()
        third = SQLiteBackend(tmp_path / "h.db")
        try:
            await third.open()
        finally:
            await second.close()
