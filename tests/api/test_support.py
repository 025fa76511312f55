"""Support ("godmode"): the platform's server-level token, every use of it audited, and impersonation
with ``kubectl --as=NAME`` acting exactly as that identity, shown to the account's Admins under both names."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.conftest import make_account
from tests.api.server import HERDER, Server, free_port, running, support_token_file


@pytest.fixture(scope="module")
def support_token(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return support_token_file(tmp_path_factory.mktemp("support"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, support_token: tuple[Path, str]) -> Iterator[Server]:
    with running(
        tmp_path_factory.mktemp("herder") / "data", "--support-token-file", str(support_token[0])
    ) as s:
        yield s


@pytest.fixture(scope="module")
def kubeconfigs(server: Server, support_token: tuple[Path, str]) -> dict[str, Path]:
    async def make() -> dict[str, str]:
        return {
            role: await make_account(server, f"acct-{role.lower()}", role)
            for role in ("Reader", "Operator", "Admin")
        }

    tokens = asyncio.run(make())
    out = {role: server.kubeconfig_for(token, f"acct-{role.lower()}") for role, token in tokens.items()}
    out["Support"] = server.kubeconfig_for(support_token[1], "support")
    return out


def _kubectl(server: Server, kubeconfig: Path, *args: str) -> tuple[int, str, str]:
    result = server.run("kubectl", *args, kubeconfig=kubeconfig)
    return result.returncode, result.stdout, result.stderr


def test_the_support_token_is_support(server: Server, kubeconfigs: dict[str, Path]) -> None:
    code, out, _ = _kubectl(server, kubeconfigs["Support"], "get", "serviceaccounts", "-o", "name")
    assert code == 0 and "serviceaccount.herder.dev/acct-admin" in out
    code, _, err = _kubectl(server, kubeconfigs["Support"], "get", "clustersecrets")
    assert code == 0, err


def test_support_acts_as_an_identity_with_its_rights_only(
    server: Server, kubeconfigs: dict[str, Path]
) -> None:
    patch = server.data_dir.parent / "as-operator.yaml"
    patch.write_text(
        "apiVersion: herder.dev/v1alpha1\nkind: ConfigPatch\nmetadata: {name: by-support, namespace: default}\n"
        "spec: {data: 'machine: {}'}\n"
    )
    code, _, err = _kubectl(server, kubeconfigs["Support"], "--as=acct-operator", "apply", "-f", str(patch))
    assert code == 0, err
    code, _, err = _kubectl(
        server, kubeconfigs["Support"], "--as=acct-reader", "delete", "configpatch", "by-support"
    )
    assert code != 0 and "serviceaccount:acct-reader (role Reader) cannot delete" in err
    code, _, err = _kubectl(server, kubeconfigs["Support"], "--as=acct-reader", "get", "clustersecrets")
    assert code != 0 and "Forbidden" in err
    code, _, err = _kubectl(server, kubeconfigs["Support"], "--as=nobody", "get", "configpatches")
    assert code != 0 and "cannot impersonate 'nobody'" in err


def test_only_support_may_impersonate(server: Server, kubeconfigs: dict[str, Path]) -> None:
    code, _, err = _kubectl(server, kubeconfigs["Admin"], "--as=acct-operator", "get", "configpatches")
    assert code != 0 and "may not impersonate: only Support may" in err
    code, _, err = _kubectl(server, kubeconfigs["Support"], "--as=acct-operator", "--as-group=x", "get", "cp")
    assert code != 0 and "use Impersonate-User" in err


def test_admins_see_what_support_did_as_whom(server: Server, kubeconfigs: dict[str, Path]) -> None:
    code, out, err = _kubectl(server, kubeconfigs["Admin"], "get", "auditevents", "-o", "json")
    assert code == 0, err
    events = [e["spec"] for e in json.loads(out)["items"]]
    made = [e for e in events if e["name"] == "by-support" and e["verb"] in ("create", "patch")]
    assert made and made[-1]["user"] == "serviceaccount:acct-operator"
    assert made[-1]["impersonator"] == "support:platform" and made[-1]["role"] == "Operator"
    # Support's own reads are audited too.
    assert any(
        e["user"] == "support:platform" and e["verb"] == "list" and e["kind"] == "ServiceAccount"
        for e in events
    )
    listed = server.run("kubectl", "get", "auditevents", kubeconfig=kubeconfigs["Admin"]).stdout
    assert "IMPERSONATOR" in listed and "support:platform" in listed
    # herder audit's table shows who really acted beside whom they acted as.
    shown = server.run("herder", "audit", "--name", "by-support", kubeconfig=kubeconfigs["Admin"])
    rows = [line for line in shown.stdout.splitlines() if " create " in line or " patch " in line]
    assert rows and all("serviceaccount:acct-operator (by support:platform)" in row for row in rows), shown


def test_a_support_token_file_others_may_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(secrets.token_urlsafe(32))
    path.chmod(0o644)
    result = subprocess.run(
        [
            HERDER,
            "serve",
            "--data-dir",
            str(tmp_path / "d"),
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--talos-listen",
            f"127.0.0.1:{free_port()}",
            "--support-token-file",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ},
    )
    assert result.returncode == 1
    assert result.stderr.strip().startswith("error: --support-token-file") and "make it 0600" in result.stderr
