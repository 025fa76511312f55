"""Several ``herder serve`` replicas on one etcd: each serves the API over the shared state, only the
elected one runs the controllers, and another takes over within 15 s when it is killed."""

from __future__ import annotations

import os
import re
import signal
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from herder.state.etcd_process import EtcdCluster, etcd_available
from tests.api.server import Server, running

pytestmark = pytest.mark.etcd


@pytest.fixture
def etcd() -> Iterator[str]:
    if not etcd_available():
        pytest.skip("the etcd binary is not installed (make test installs Debian's etcd-server)")
    with EtcdCluster(members=1) as cluster:
        yield "etcd://" + ",".join(cluster.endpoints)


def leading(server: Server, token: str) -> bool | None:
    """Whether the replica runs the controllers (its herder_leader gauge); None if it does not answer."""
    try:
        with httpx.Client(verify=_trust(server), timeout=2) as http:
            answer = http.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError:
        return None
    match = re.search(r"^herder_leader ([0-9.]+)$", answer.text, re.MULTILINE)
    return match is not None and float(match.group(1)) == 1.0


def _trust(server: Server) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=server.ca.decode())


def admin_token(server: Server) -> str:
    text = server.kubeconfig.read_text()
    match = re.search(r"token: (\S+)", text)
    assert match
    return match.group(1)


def test_one_replica_leads_and_another_takes_over(tmp_path: Path, etcd: str) -> None:
    # Replicas share the encryption key, as they share the state it protects.
    key = tmp_path / "encryption.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    flags = ("--state", etcd, "--encryption-key-file", str(key))
    with running(tmp_path / "a", *flags) as a, running(tmp_path / "b", *flags) as b:
        token = admin_token(a)
        # A token issued through one replica works on the other: one state, one key.
        with httpx.Client(verify=_trust(b), timeout=5) as http:
            answer = http.get(f"{b.url}/api/v1/namespaces", headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 200, answer.text
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and [leading(a, token), leading(b, token)].count(True) != 1:
            time.sleep(0.2)
        states = [leading(a, token), leading(b, token)]
        assert states.count(True) == 1, states
        leader, follower = (a, b) if states[0] else (b, a)
        os.kill(leader.process.pid, signal.SIGKILL)
        leader.process.wait()
        killed = time.monotonic()
        while time.monotonic() - killed < 20 and not leading(follower, token):
            time.sleep(0.2)
        assert leading(follower, token), "no replica took over the controllers"
        assert time.monotonic() - killed < 15
