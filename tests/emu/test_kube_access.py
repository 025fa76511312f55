"""The emulated kube-apiserver authorizes as Kubernetes does and its pods stream, driven by the real kubectl
against a real ``herder emu run`` process: a user bound to ``view`` through a group reads and is refused
changes with Kubernetes' 403; impersonation only for callers allowed it; ``auth can-i`` and ``auth whoami``;
``exec``, ``logs -f`` and ``port-forward`` over the protocols kubectl speaks (WebSocket first, SPDY after)."""

from __future__ import annotations

import asyncio
import base64
import os
import queue
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import yaml

from herder.emu.control.process import EmulatorProcess
from herder.talos import pki
from herder.talos.machine import MachineClient
from herder.talos.pki import ExtUsage, Usage
from tests.emu.clusters import KUBECTL
from tests.emu.support import cluster_configs, random_cidr

pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl is not installed")

VIEW_BINDING = """
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: team-a-view, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: team-a}]
"""
IMPERSONATOR = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: team-a-impersonator}
rules:
- {apiGroups: [""], resources: [users], verbs: [impersonate]}
- {apiGroups: [""], resources: [groups], verbs: [impersonate], resourceNames: [team-a]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: proxy-impersonates}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: team-a-impersonator}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: proxy}]
"""
WEB = """
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers:
  - {name: web, image: "nginx:1.27", ports: [{containerPort: 80}]}
"""


@dataclass
class Cluster:
    directory: Path

    def kubectl(
        self, *args: str, user: str = "admin", env: dict[str, str] | None = None, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """The real kubectl as ``user`` (a kubeconfig written by ``_user``)."""
        return subprocess.run(
            self.command(*args, user=user),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **(env or {})},
        )

    def command(self, *args: str, user: str = "admin") -> list[str]:
        config = self.directory / f"{user}.kubeconfig"
        return [KUBECTL, f"--kubeconfig={config}", f"--cache-dir={self.directory / 'cache'}", *args]

    def ok(
        self, *args: str, user: str = "admin", env: dict[str, str] | None = None, stdin: str | None = None
    ) -> str:
        proc = self.kubectl(*args, user=user, env=env, stdin=stdin)
        assert proc.returncode == 0, f"kubectl {' '.join(args)} as {user}: {proc.stderr}"
        return proc.stdout

    def refused(self, *args: str, user: str) -> str:
        proc = self.kubectl(*args, user=user)
        assert proc.returncode != 0, f"kubectl {' '.join(args)} as {user} was allowed: {proc.stdout}"
        return proc.stderr.strip()


def _user(directory: Path, admin: Path, ca: pki.CertificateAndKey, name: str, groups: list[str]) -> None:
    """A kubeconfig for a user of client certificate CN=name, O=groups, from the cluster's Kubernetes CA."""
    now = datetime.now(UTC)
    cert = pki.issue_certificate(
        ca,
        common_name=name,
        organizations=groups,
        not_before=now - timedelta(seconds=10),
        not_after=now + timedelta(hours=1),
        usage=Usage.DIGITAL_SIGNATURE | Usage.KEY_ENCIPHERMENT,
        ext_usage=ExtUsage.CLIENT_AUTH,
    )
    config = yaml.safe_load(admin.read_text())
    config["users"][0]["user"] = {
        "client-certificate-data": base64.b64encode(cert.crt).decode(),
        "client-key-data": base64.b64encode(cert.key).decode(),
    }
    (directory / f"{name}.kubeconfig").write_text(yaml.safe_dump(config))


async def _stage(emulator: EmulatorProcess, uuid: str, stage: str) -> None:
    deadline = time.monotonic() + 30
    while (await emulator.control("GET", f"/machines/{uuid}"))["stage"] != stage:
        assert time.monotonic() < deadline, f"machine {uuid} did not reach {stage}"
        await asyncio.sleep(0.05)


async def _form(emulator: EmulatorProcess, directory: Path) -> pki.CertificateAndKey:
    """One control plane and one worker through the Talos API, bootstrapped; the admin kubeconfig written."""
    await emulator.wait_ready()
    control_plane, worker = emulator.published()[:2]
    host = control_plane["endpoint"].rsplit(":", 1)[0]
    configs = cluster_configs("access", f"https://{host}:6443")
    for machine, config in ((control_plane, configs.controlplane), (worker, configs.worker)):
        await _stage(emulator, machine["uuid"], "MAINTENANCE")
        async with MachineClient.insecure(machine["endpoint"]) as client:
            await client.apply_configuration(config)
    for machine in (control_plane, worker):
        await _stage(emulator, machine["uuid"], "RUNNING")
    async with MachineClient.from_talosconfig(
        configs.talosconfig, endpoint=control_plane["endpoint"]
    ) as client:
        await client.bootstrap()
        (directory / "admin.kubeconfig").write_bytes(await client.kubeconfig())
    return configs.secrets.k8s


def _until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout}s"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("kube-access")
    emulator = EmulatorProcess(data_dir=directory / "emu", machines=2, machine_cidr=random_cidr())
    (directory / "emu").mkdir()
    emulator.start()
    try:
        ca = asyncio.run(_form(emulator, directory))
        for name, groups in (("alice", ["team-a"]), ("proxy", []), ("mallory", [])):
            _user(directory, directory / "admin.kubeconfig", ca, name, groups)
        found = Cluster(directory)
        # The API serves once the control plane runs kube-apiserver; the default roles come with it.
        _until(lambda: found.kubectl("get", "clusterrole", "view").returncode == 0, "the default roles")
        found.ok("apply", "-f", "-", stdin=VIEW_BINDING + "---" + IMPERSONATOR + "---" + WEB)
        _until(lambda: "Running" in found.ok("get", "pod", "web"), "the pod running")
        yield found
    finally:
        emulator.stop()


def _forbidden(verb: str, resource: str, where: str, name: str = "", user: str = "alice") -> str:
    """Kubernetes' 403 as kubectl prints it (``Error from server (Forbidden): MESSAGE``)."""
    scope = f'in the namespace "{where}"' if where else "at the cluster scope"
    subject = f'{resource.split("/", maxsplit=1)[0]} "{name}"' if name else resource.split("/", maxsplit=1)[0]
    return (
        f'Error from server (Forbidden): {subject} is forbidden: User "{user}" cannot {verb} resource '
        f'"{resource}" in API group "" {scope}'
    )


def _refusal(message: str) -> str:
    """What a typed create command prints of the same 403."""
    return "error: failed to create configmap: " + message.removeprefix("Error from server (Forbidden): ")


def test_a_user_bound_to_view_through_a_group_reads_and_is_refused_changes(cluster: Cluster) -> None:
    assert cluster.ok("get", "pods", "-o", "name", user="alice").split() == ["pod/web"]
    assert "kube-root-ca.crt" in cluster.ok("get", "configmaps", user="alice")
    assert "nginx:1.27" in cluster.ok("logs", "web", user="alice")
    assert cluster.refused("delete", "pod", "web", user="alice") == _forbidden(
        "delete", "pods", "default", "web"
    )
    assert cluster.refused("create", "configmap", "x", user="alice") == _refusal(
        _forbidden("create", "configmaps", "default")
    )
    # view grants no secrets, and the binding holds in its namespace only.
    assert cluster.refused("get", "secrets", user="alice") == _forbidden("list", "secrets", "default")
    assert cluster.refused("get", "pods", "-n", "kube-system", user="alice") == _forbidden(
        "list", "pods", "kube-system"
    )
    assert cluster.refused("get", "nodes", user="alice") == _forbidden("list", "nodes", "")
    assert cluster.refused("exec", "web", "--", "hostname", user="alice") == _forbidden(
        "create", "pods/exec", "default", "web"
    )
    assert "Running" in cluster.ok("get", "pod", "web", user="admin")  # the refused delete left it

    def can(*args: str) -> str:
        proc = cluster.kubectl("auth", "can-i", *args, user="alice")
        return proc.stdout.strip()

    assert can("get", "pods") == "yes"
    assert can("get", "pods/log") == "yes"
    assert can("delete", "pods") == "no"
    assert can("create", "pods/exec") == "no"
    assert can("list", "pods", "-n", "kube-system") == "no"
    assert can("get", "/version") == "yes"
    listed = cluster.ok("auth", "can-i", "--list", user="alice")
    assert re.search(r"^pods\s+\[\]\s+\[\]\s+\[get list watch\]", listed, re.M)
    who = cluster.ok("auth", "whoami", user="alice")
    assert re.search(r"^Username\s+alice$", who, re.M) and re.search(
        r"^Groups\s+\[team-a system:authenticated\]$", who, re.M
    )
    assert cluster.kubectl("auth", "can-i", "delete", "pods", user="admin").stdout.strip() == "yes"


def test_impersonation_is_only_for_callers_allowed_it(cluster: Cluster) -> None:
    # Anyone without the impersonate verb is refused, in Kubernetes' words.
    assert cluster.refused("get", "pods", "--as=alice", user="mallory") == (
        'Error from server (Forbidden): users "alice" is forbidden: User "mallory" cannot impersonate resource '
        '"users" in API group "" at the cluster scope'
    )
    # proxy may impersonate any user, with group team-a only; the request is then alice's.
    assert cluster.ok(
        "get", "pods", "-o", "name", "--as=alice", "--as-group=team-a", user="proxy"
    ).split() == ["pod/web"]
    assert cluster.refused(
        "delete", "pod", "web", "--as=alice", "--as-group=team-a", user="proxy"
    ) == _forbidden("delete", "pods", "default", "web")
    assert cluster.refused("get", "pods", "--as=alice", "--as-group=system:masters", user="proxy") == (
        'Error from server (Forbidden): groups "system:masters" is forbidden: User "proxy" cannot impersonate '
        'resource "groups" in API group "" at the cluster scope'
    )
    # An impersonated user without groups is in system:authenticated only: no view.
    assert cluster.refused("get", "pods", "--as=alice", user="proxy") == _forbidden("list", "pods", "default")
    who = cluster.ok("auth", "whoami", "--as=carol", "--as-group=team-a", user="proxy")
    assert re.search(r"^Groups\s+\[team-a system:authenticated\]$", who, re.M)
    # system:masters may impersonate anyone.
    who = cluster.ok("auth", "whoami", "--as=dave", user="admin")
    assert re.search(r"^Username\s+dave$", who, re.M) and re.search(
        r"^Groups\s+\[system:authenticated\]$", who, re.M
    )


@pytest.mark.parametrize("websockets", ["true", "false"], ids=["websocket", "spdy"])
def test_exec_runs_simple_commands(cluster: Cluster, websockets: str) -> None:
    env = {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": websockets}
    assert cluster.ok("exec", "web", "--", "echo", "hello", "world", env=env) == "hello world\n"
    assert cluster.ok("exec", "web", "--", "hostname", env=env) == "web\n"
    assert cluster.ok("exec", "web", "--", "cat", "/etc/hostname", env=env) == "web\n"
    assert cluster.ok("exec", "-i", "web", "--", "cat", env=env, stdin="from stdin\n") == "from stdin\n"
    proc = cluster.kubectl("exec", "web", "--", "sh", "-c", "echo out; echo err >&2; exit 3", env=env)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        3,
        "out\n",
        "err\ncommand terminated with exit code 3\n",
    )
    proc = cluster.kubectl("exec", "web", "--", "ls", env=env)
    assert proc.returncode == 1 and 'exec: "ls": executable file not found in $PATH' in proc.stderr


class _Lines:
    """The lines a running process prints, read as they come."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))

    def next(self, timeout: float = 15.0) -> str:
        return self._lines.get(timeout=timeout)


def _forward(cluster: Cluster, port: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], _Lines, int]:
    """``kubectl port-forward pod/web :PORT`` running; its local port."""
    proc = subprocess.Popen(
        cluster.command("port-forward", "pod/web", f":{port}"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **env},
    )
    lines = _Lines(proc)
    match = re.match(r"Forwarding from 127\.0\.0\.1:(\d+) -> " + port, lines.next())
    assert match, "port-forward did not start"
    return proc, lines, int(match.group(1))


def _end(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("websockets", ["true", "false"], ids=["websocket-tunnel", "spdy"])
def test_port_forward_reaches_the_port_a_pod_serves(cluster: Cluster, websockets: str) -> None:
    env = {"KUBECTL_PORT_FORWARD_WEBSOCKETS": websockets}
    proc, _lines, port = _forward(cluster, "80", env)
    try:
        with httpx.Client(timeout=10) as http:
            for path in ("/", "/second"):  # two connections through one forward
                answer = http.get(f"http://127.0.0.1:{port}{path}", headers={"connection": "close"})
                assert answer.status_code == 200 and answer.text == f"web (web, port 80) answers GET {path}\n"
    finally:
        _end(proc)
    # A port nobody serves: the connection is refused inside the pod, and kubectl says so.
    proc, lines, port = _forward(cluster, "81", env)
    try:
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{port}/", timeout=10)
        while "error forwarding" not in (said := lines.next()):
            pass
        assert "error forwarding port 81 to pod" in said and "connect: connection refused" in said, said
    finally:
        _end(proc)


def test_logs_follow_streams_what_the_container_writes(cluster: Cluster) -> None:
    follow = subprocess.Popen(
        cluster.command("logs", "-f", "web", user="alice"), stdout=subprocess.PIPE, text=True, env=os.environ
    )
    forward = None
    try:
        lines = _Lines(follow)
        assert lines.next() == "nginx:1.27: running as web"
        forward, _, port = _forward(cluster, "80", {})
        httpx.get(f"http://127.0.0.1:{port}/followed", headers={"user-agent": "follow-test"}, timeout=10)
        # Earlier tests' requests come first; this one's line arrives while kubectl follows.
        while "/followed" not in (line := lines.next()):
            pass
        assert re.fullmatch(
            r'127\.0\.0\.1 - - \[.*\] "GET /followed HTTP/1\.1" 200 \d+ "-" "follow-test"', line
        )
        assert follow.poll() is None
    finally:
        if forward is not None:
            _end(forward)
        _end(follow)
    tail = cluster.ok("logs", "web", "--tail=1", "--timestamps")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z 127\.0\.0\.1 .*\n", tail)
