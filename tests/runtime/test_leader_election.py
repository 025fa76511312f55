"""Leader election on a real etcd: one leader among processes, takeover after kill -9, handover on release."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

import pytest

from herder.runtime.leader import AlwaysLeader, EtcdLeaderElection
from herder.state.etcd import EtcdBackend
from herder.state.etcd_process import EtcdCluster, etcd_available

pytestmark = [
    pytest.mark.etcd,
    pytest.mark.skipif(
        not etcd_available(),
        reason="the etcd binary is not installed (make test installs Debian's etcd-server)",
    ),
]

# A herder-like process: it campaigns, says when it leads, and stays until killed or no longer leading.
CANDIDATE = """
import asyncio, sys
from herder.runtime.leader import EtcdLeaderElection
from herder.state.etcd import EtcdBackend

async def main(endpoints, prefix, identity):
    backend = await EtcdBackend(endpoints.split(","), prefix=prefix).open()
    election = EtcdLeaderElection(backend, "controllers", identity)
    print("CAMPAIGNING", flush=True)
    await election.acquire()
    print("LEADING", flush=True)
    await election.lost.wait()
    print("LOST", flush=True)

asyncio.run(main(*sys.argv[1:]))
"""


async def _line(proc: asyncio.subprocess.Process, timeout: float) -> str:
    assert proc.stdout is not None
    return (await asyncio.wait_for(proc.stdout.readline(), timeout)).decode().strip()


async def test_one_of_two_processes_leads_and_the_other_takes_over_after_kill_9(
    etcd: EtcdCluster, backend: EtcdBackend
) -> None:
    procs: dict[str, asyncio.subprocess.Process] = {}
    try:
        for name in ("a", "b"):
            procs[name] = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                CANDIDATE,
                ",".join(etcd.endpoints),
                backend.prefix,
                name,
                stdout=asyncio.subprocess.PIPE,
            )
            assert await _line(procs[name], 30) == "CAMPAIGNING"
        reads = {name: asyncio.ensure_future(_line(proc, 30)) for name, proc in procs.items()}
        done, _ = await asyncio.wait(reads.values(), timeout=30, return_when=asyncio.FIRST_COMPLETED)
        assert done, "no process became leader"
        leader = next(name for name, read in reads.items() if read in done)
        follower = "b" if leader == "a" else "a"
        assert reads[leader].result() == "LEADING"
        await asyncio.sleep(1)
        assert not reads[follower].done(), "both processes lead"
        assert await EtcdLeaderElection(backend, "controllers", "observer").leader() == leader

        os.kill(procs[leader].pid, signal.SIGKILL)
        killed = time.monotonic()
        assert await asyncio.wait_for(reads[follower], 20) == "LEADING"
        took = time.monotonic() - killed
        assert took < 15, f"takeover took {took:.1f} s"
        assert await EtcdLeaderElection(backend, "controllers", "observer").leader() == follower
    finally:
        for proc in procs.values():
            if proc.returncode is None:
                os.kill(proc.pid, signal.SIGKILL)
                await proc.wait()


async def test_release_hands_over_at_once_and_sets_lost(backend: EtcdBackend) -> None:
    first = EtcdLeaderElection(backend, "ctl", "first", ttl=5)
    second = EtcdLeaderElection(backend, "ctl", "second", ttl=5)
    await asyncio.wait_for(first.acquire(), 10)
    waiting = asyncio.ensure_future(second.acquire())
    await asyncio.sleep(0.5)
    assert not waiting.done()
    started = time.monotonic()
    await first.release()
    assert first.lost.is_set()
    await asyncio.wait_for(waiting, 5)
    assert time.monotonic() - started < 2
    assert not second.lost.is_set()
    assert await second.leader() == "second"
    await second.release()


async def test_leader_learns_it_lost_when_its_key_is_gone(backend: EtcdBackend) -> None:
    election = EtcdLeaderElection(backend, "ctl", "only", ttl=5)
    await asyncio.wait_for(election.acquire(), 10)
    kv = await backend.get_coordination(election.key)
    assert kv is not None
    # An operator removes the key (here: ends the lease it hangs on).
    lease = election._lease
    assert lease is not None
    await backend.revoke_lease(lease)
    await asyncio.wait_for(election.lost.wait(), 5)
    await election.release()


async def test_always_leader_leads_at_once_until_released() -> None:
    election = AlwaysLeader()
    await asyncio.wait_for(election.acquire(), 1)
    assert not election.lost.is_set()
    await election.release()
    assert election.lost.is_set()
