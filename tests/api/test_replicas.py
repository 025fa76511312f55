"""Several ``herder serve`` replicas on one etcd: each serves the API over the shared state, only the
elected one runs the controllers, and another takes over within 15 s when it is killed."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509

from herder.api.datadir import write_kubeconfig
from herder.client.kubeconfig import load
from herder.controllers.clusters.endpoint_balancer import EndpointBalancer
from herder.state.etcd_process import EtcdCluster, etcd_available
from tests.api.server import KUBECTL, Server, free_port, running

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


# What replicas share besides the state and the encryption key, as docs/api.md says: the data
# directory's two CAs, copied from the first replica before the others first start.
SHARED_CAS = ("ca.crt", "ca.key", "talos-gateway-ca.crt", "talos-gateway-ca.key")


async def test_two_replicas_behind_one_address_take_one_kubeconfig(tmp_path: Path, etcd: str) -> None:
    """Set up as a user would from the docs: two replicas on their own addresses, a TCP load balancer in
    front at a third (named in their certificates with --tls-san), and the first replica's kubeconfig
    pointed at it: every request works, whichever replica answers, and still when one of them stops."""
    key = tmp_path / "encryption.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    front = "127.0.0.9"
    flags = ("--state", etcd, "--encryption-key-file", str(key), "--tls-san", front)
    with running(tmp_path / "a", *flags, host="127.0.0.2") as a:
        (tmp_path / "b").mkdir(mode=0o700)
        for name in SHARED_CAS:
            shutil.copy2(a.data_dir / name, tmp_path / "b" / name)
        with running(tmp_path / "b", *flags, host="127.0.0.3") as b:
            # Each replica issued its serving certificates from the shared CAs.
            for ca, served in (("ca.crt", "tls.crt"), ("talos-gateway-ca.crt", "talos-gateway-tls.crt")):
                authority = x509.load_pem_x509_certificate((a.data_dir / ca).read_bytes())
                for replica in (a, b):
                    x509.load_pem_x509_certificate(
                        (replica.data_dir / served).read_bytes()
                    ).verify_directly_issued_by(authority)
            balancer = EndpointBalancer(front, free_port(), check_every=0.2)
            await balancer.start()
            try:
                balancer.set_backends([f"{a.host}:{a.port}", f"{b.host}:{b.port}"])
                async with asyncio.timeout(10):
                    while len(balancer.healthy) != 2:  # noqa: ASYNC110 - the balancer offers nothing to wait on
                        await asyncio.sleep(0.05)
                kubeconfig = tmp_path / "front.kubeconfig"
                credentials = load(a.kubeconfig)
                assert credentials.token
                write_kubeconfig(
                    kubeconfig, f"https://{front}:{balancer.port}", credentials.ca_pem, credentials.token
                )
                for _ in range(6):  # round robin: both replicas answer
                    listed = await asyncio.to_thread(_kubectl, kubeconfig, "get", "ns", "default")
                    assert listed.returncode == 0, listed.stderr
                a.process.terminate()
                a.process.wait(15)
                async with asyncio.timeout(10):
                    while len(balancer.healthy) != 1:  # noqa: ASYNC110
                        await asyncio.sleep(0.05)
                listed = await asyncio.to_thread(_kubectl, kubeconfig, "get", "ns", "default")
                assert listed.returncode == 0, listed.stderr
            finally:
                await balancer.stop()


def _kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, timeout=60
    )
