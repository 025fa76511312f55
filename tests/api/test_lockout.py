"""No self-lockout: the last Admin that can sign in cannot be deleted, demoted or lose its last token (409
saying why and what to do first), through kubectl and herder's CLI as an Admin would try it; once another
Admin can sign in, each of those is allowed."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.server import Server, running


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running(tmp_path_factory.mktemp("lockout") / "data") as s:
        yield s


def _refused(result: subprocess.CompletedProcess[str], *reasons: str) -> None:
    assert result.returncode != 0, result.stdout
    for reason in reasons:
        assert reason in result.stderr, result.stderr


def _tokens(server: Server, subject: str, kubeconfig: Path | None = None) -> list[str]:
    listed = json.loads(server.run("kubectl", "get", "tokens", "-o", "json", kubeconfig=kubeconfig).stdout)
    return [t["metadata"]["name"] for t in listed["items"] if t["spec"]["subject"] == subject]


def test_the_last_admin_cannot_lock_everyone_out(server: Server, tmp_path: Path) -> None:
    last = "the last Admin that can sign in"
    _refused(
        server.run("herder", "serviceaccount", "delete", "admin"), "Conflict", last, "make another Admin"
    )
    _refused(server.run("kubectl", "delete", "serviceaccount", "admin"), "Conflict", last)
    demote = '{"spec": {"role": "Operator"}}'
    _refused(server.run("kubectl", "patch", "serviceaccount", "admin", "--type=merge", "-p", demote), last)
    (only,) = _tokens(server, "admin")
    _refused(
        server.run("kubectl", "delete", "token", only), "last token", "herder serviceaccount token admin"
    )
    assert server.run("kubectl", "get", "ns").returncode == 0  # still signed in

    # With a second token, the first may go.
    second_token = server.run("herder", "serviceaccount", "token", "admin").stdout.strip()
    admin = server.kubeconfig_for(second_token, "admin-again")
    assert server.run("kubectl", "delete", "token", only, kubeconfig=admin).returncode == 0

    # An Admin without a token cannot sign in: it does not count.
    created = server.run(
        "herder", "serviceaccount", "create", "tokenless", "--role", "Admin", kubeconfig=admin
    )
    assert created.returncode == 0, created.stderr
    for name in _tokens(server, "tokenless", admin):
        assert server.run("kubectl", "delete", "token", name, kubeconfig=admin).returncode == 0
    _refused(server.run("kubectl", "delete", "serviceaccount", "admin", kubeconfig=admin), last)

    # Another Admin that can sign in: now admin may be demoted and deleted, and the other is the last.
    other = tmp_path / "other.kubeconfig"
    made = server.run(
        "herder",
        "serviceaccount",
        "create",
        "other",
        "--role",
        "Admin",
        "--write-kubeconfig",
        str(other),
        kubeconfig=admin,
    )
    assert made.returncode == 0, made.stderr
    assert server.run("kubectl", "delete", "serviceaccount", "tokenless", kubeconfig=other).returncode == 0
    demoted = server.run(
        "kubectl", "patch", "serviceaccount", "admin", "--type=merge", "-p", demote, kubeconfig=other
    )
    assert demoted.returncode == 0, demoted.stderr
    assert server.run("herder", "serviceaccount", "delete", "admin", kubeconfig=other).returncode == 0
    _refused(server.run("herder", "serviceaccount", "delete", "other", kubeconfig=other), last)
    _refused(
        server.run("kubectl", "delete", "token", _tokens(server, "other", other)[0], kubeconfig=other), last
    )
    assert server.run("kubectl", "get", "ns", kubeconfig=other).returncode == 0
