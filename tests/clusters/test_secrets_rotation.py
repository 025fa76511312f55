"""CA rotation end to end on the emulator, as a user drives it with herder's CLI: on a 3+2 cluster both the
Talos API CA and the Kubernetes CA rotate while the Talos API (through herder's gateway) and the Kubernetes
API (through herder's proxy) are polled every 200 ms without one failure and the cluster stays Ready;
afterwards credentials of the old CA are refused by the machines and new ones work; and a kill -9 of
herder in the middle of a rotation resumes it to the end."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from herder.talos.kubeconfig import issue_admin_certificate
from herder.talos.machine import Credentials, MachineAPIError, MachineClient
from herder.talos.pki import load_cert_chain
from herder.talos.secrets import SecretsBundle, load_secrets
from herder.talos.talosconfig import issue_client_certificate, load_talosconfig_file
from tests.api.server import KUBECTL, free_port, running, support_token_file
from tests.clusters.site import Site, cluster, machine_set, running_site

pytestmark = pytest.mark.steps

NAME = "rho"
EVERY = 0.2


@pytest.fixture(scope="module")
def support(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return support_token_file(tmp_path_factory.mktemp("support"))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, support: tuple[Path, str]) -> Iterator[Site]:
    args = ("--support-token-file", str(support[0]), "--talos-listen", f"127.0.0.1:{free_port()}")
    with running_site(tmp_path_factory.mktemp("rotation"), 5, *args) as s:
        uuids = [m["uuid"] for m in s.machines]
        s.apply(
            [
                cluster(NAME),
                machine_set(NAME, f"{NAME}-control-planes", "controlplane", machines=uuids[:3]),
                machine_set(NAME, f"{NAME}-workers", "worker", machines=uuids[3:]),
            ]
        )
        s.wait("cluster", NAME, timeout=240)
        yield s


def _token(kubeconfig: Path) -> str:
    config = yaml.safe_load(kubeconfig.read_text())
    return str(config["users"][0]["user"]["token"])


def _bundle(site: Site, support: tuple[Path, str]) -> SecretsBundle:
    """The cluster's secrets as they are now (only Support may read them)."""

    async def read() -> SecretsBundle:
        async with site.server.http(support[1]) as http:
            answer = await http.get(f"/apis/herder.dev/v1alpha1/namespaces/default/clustersecrets/{NAME}")
            answer.raise_for_status()
            return load_secrets(answer.json()["spec"]["bundle"])

    return asyncio.run(read())


def _direct(bundle: SecretsBundle) -> Credentials:
    """A talosconfig's credentials straight to the machines, from the cluster's Talos CA of ``bundle``."""
    issued = issue_client_certificate(bundle.os, ("os:admin",))
    return Credentials(bundle.os.crt, issued.crt, issued.key)


def _talos_answers(endpoint: str, credentials: Credentials, *, trust: bytes | None = None) -> bool:
    async def ask() -> bool:
        ca = trust if trust is not None else credentials.ca
        client = MachineClient(
            endpoint, credentials=Credentials(ca, credentials.crt, credentials.key), timeout=10, retries=0
        )
        try:
            await client.version()
            return True
        except MachineAPIError:
            return False
        finally:
            await client.close()

    return asyncio.run(ask())


def _kubernetes_answers(endpoint: str, bundle: SecretsBundle, *, trust: bytes) -> int | str:
    """The status of ``GET /api/v1/nodes`` on the cluster's API with an admin certificate of ``bundle``'s
    Kubernetes CA, or why the connection failed (a refused certificate)."""
    issued = issue_admin_certificate(bundle.k8s, common_name="rotation-test")
    context = ssl.create_default_context(cadata=trust.decode())
    load_cert_chain(context, issued.crt, issued.key)
    try:
        return httpx.get(f"{endpoint}/api/v1/nodes", verify=context, timeout=10).status_code
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"


@dataclass
class Polls:
    """The Talos API through herder's gateway, the Kubernetes API through herder's proxy and the
    cluster's Ready condition, asked every 200 ms from a thread of its own until stopped."""

    site: Site
    talosconfig: Path
    token: str
    nodes: list[str]
    done: int = 0
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Polls:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=30)

    async def _run(self) -> None:
        server = self.site.server
        context = ssl.create_default_context(cadata=server.ca.decode())
        headers = {"Authorization": f"Bearer {self.token}"}
        config = load_talosconfig_file(self.talosconfig)
        async with httpx.AsyncClient(
            base_url=server.url, headers=headers, verify=context, timeout=10
        ) as http:
            turn = 0
            while not self._stop.is_set():
                node = self.nodes[turn % len(self.nodes)]
                turn += 1
                started = time.monotonic()
                await self._talos(config, node)
                await self._kubernetes(http)
                await self._ready(http)
                self.done += 1
                await asyncio.sleep(max(0.0, EVERY - (time.monotonic() - started)))

    async def _talos(self, config: Any, node: str) -> None:
        client = MachineClient.from_talosconfig(config, node=node, timeout=10, retries=0)
        try:
            await client.version()
        except MachineAPIError as exc:
            self.failures.append(f"Talos API of {node}: {exc}")
        finally:
            await client.close()

    async def _kubernetes(self, http: httpx.AsyncClient) -> None:
        try:
            answer = await http.get(f"/k8s/clusters/default/{NAME}/api/v1/namespaces/kube-system/pods")
            if answer.status_code != 200:
                self.failures.append(f"Kubernetes API: {answer.status_code} {answer.text[:200]}")
        except httpx.HTTPError as exc:
            self.failures.append(f"Kubernetes API: {type(exc).__name__}: {exc}")

    async def _ready(self, http: httpx.AsyncClient) -> None:
        try:
            answer = await http.get(f"/apis/herder.dev/v1alpha1/namespaces/default/clusters/{NAME}")
            conditions = (answer.json().get("status") or {}).get("conditions") or []
            ready: dict[str, Any] = next((c for c in conditions if c["type"] == "Ready"), {})
            if ready.get("status") != "True":
                self.failures.append(f"cluster not Ready: {ready.get('reason')}: {ready.get('message')}")
        except httpx.HTTPError as exc:
            self.failures.append(f"herder's API: {type(exc).__name__}: {exc}")


def _polls(site: Site) -> Polls:
    talosconfig = site.workdir / "admin.talosconfig"
    site.run("herder", "cluster", "talosconfig", NAME, "-o", str(talosconfig), "--ttl", "7200")
    return Polls(site, talosconfig, _token(site.server.kubeconfig), [m["node"] for m in site.machines])


def _rotation(site: Site) -> dict[str, Any]:
    return dict((site.get("cluster", NAME).get("status") or {}).get("secretsRotation") or {})


def test_the_talos_ca_rotates_while_both_apis_answer_every_poll(
    site: Site, support: tuple[Path, str]
) -> None:
    before = _bundle(site, support)
    old = _direct(before)
    endpoints = [m["endpoint"] for m in site.machines]
    assert all(_talos_answers(e, old) for e in endpoints)
    with _polls(site) as polls:
        site.run("herder", "cluster", "rotate", NAME, "--talos-ca", timeout=600)
        time.sleep(1)  # a last poll or five after Done
    assert polls.failures == [] and polls.done >= 10, (polls.failures[:10], polls.done)
    rotation = _rotation(site)
    assert (rotation["component"], rotation["phase"], rotation["generation"]) == ("TalosCA", "Done", 1)
    after = _bundle(site, support)
    assert after.os.crt != before.os.crt and after.k8s == before.k8s
    # The old CA is trusted nowhere: its client certificates are refused, even by a client that trusts
    # the machines' new certificates; new ones work.
    for endpoint in endpoints:
        assert not _talos_answers(endpoint, old, trust=after.os.crt), endpoint
        assert _talos_answers(endpoint, _direct(after)), endpoint
    events = site.get("events", None, "--field-selector", f"involvedObject.name={NAME},reason=RotationDone")
    assert len(events["items"]) == 1


def test_the_kubernetes_ca_rotates_while_both_apis_answer_every_poll(
    site: Site, support: tuple[Path, str]
) -> None:
    endpoint = site.get("cluster", NAME)["status"]["endpoint"]
    before = _bundle(site, support)
    break_glass = site.workdir / "old-break-glass.kubeconfig"
    site.run("herder", "cluster", "kubeconfig", NAME, "--break-glass", "-o", str(break_glass))
    assert _kubernetes_answers(endpoint, before, trust=before.k8s.crt) == 200
    with _polls(site) as polls:
        site.run("herder", "cluster", "rotate", NAME, "--kubernetes-ca", timeout=600)
        time.sleep(1)
    assert polls.failures == [] and polls.done >= 10, (polls.failures[:10], polls.done)
    rotation = _rotation(site)
    assert (rotation["component"], rotation["phase"], rotation["generation"]) == ("KubernetesCA", "Done", 2)
    after = _bundle(site, support)
    assert after.k8s.crt != before.k8s.crt
    # An admin certificate of the old CA is refused by every API server; one of the new CA is served.
    refused = _kubernetes_answers(endpoint, before, trust=after.k8s.crt)
    assert refused in (401, 403) or isinstance(refused, str), refused
    assert _kubernetes_answers(endpoint, after, trust=after.k8s.crt) == 200
    # The old break-glass kubeconfig no longer works; a new one does.
    assert _kubectl(break_glass, "get", "nodes").returncode != 0
    fresh = site.workdir / "new-break-glass.kubeconfig"
    site.run("herder", "cluster", "kubeconfig", NAME, "--break-glass", "-o", str(fresh))
    listed = _kubectl(fresh, "get", "nodes", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)["items"]) == 5


def _kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """kubectl straight to the cluster's API, with a kubeconfig of its own (not herder's)."""
    return subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), "--request-timeout", "20s", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_rotation_resumes_after_kill_9_of_herder(site: Site, support: tuple[Path, str]) -> None:
    before = _bundle(site, support)
    site.run("herder", "cluster", "rotate", NAME, "--talos-ca", "--no-wait")
    site.until(
        lambda: (
            _rotation(site).get("generation") == 3
            and _rotation(site).get("phase") in ("SwitchingIssuer", "ReissuingCredentials")
        ),
        timeout=180,
        every=0.1,
        what="the rotation in its middle",
    )
    os.kill(site.server.process.pid, signal.SIGKILL)
    site.server.process.wait()
    again_args = ("--cluster-endpoints", site.endpoints, "--support-token-file", str(support[0]))
    with running(site.server.data_dir, *again_args) as again:
        site.server = again
        site.until(lambda: _rotation(site).get("phase") == "Done", timeout=300, what="the rotation done")
        after = _bundle(site, support)
        assert after.os.crt != before.os.crt
        for m in site.machines:
            assert _talos_answers(m["endpoint"], _direct(after)), m
            assert not _talos_answers(m["endpoint"], _direct(before), trust=after.os.crt), m
        site.wait("cluster", NAME)
