"""The ``herder`` command line as a user runs it: subprocesses against a real server."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from herder.api.tls import ensure_tls
from herder.client.kubeconfig import load
from tests.api.server import HERDER, KUBECTL, Server, free_port, random_cidr, running, stop

PATCHES = """\
apiVersion: herder.dev/v1alpha1
kind: ConfigPatch
metadata:
  name: cli-one
  labels: {herder.dev/cluster: c1}
spec:
  data: "machine: {}"
  description: first
---
apiVersion: herder.dev/v1alpha1
kind: ConfigPatch
metadata:
  name: cli-two
spec:
  data: "cluster: {}"
"""


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_apply_get_describe_delete(server: Server, tmp_path: Path) -> None:
    manifest = tmp_path / "patches.yaml"
    manifest.write_text(PATCHES)
    assert ok(server.run("herder", "apply", "-f", str(manifest))).splitlines() == [
        "configpatch/cli-one created",
        "configpatch/cli-two created",
    ]
    assert "configpatch/cli-one unchanged" in ok(server.run("herder", "apply", "-f", str(manifest)))
    changed = PATCHES.replace("description: first", "description: second")
    assert "configpatch/cli-one configured" in ok(server.run("herder", "apply", "-f", "-", stdin=changed))

    table = ok(server.run("herder", "get", "cp")).splitlines()
    assert table[0].split() == ["NAME", "CLUSTER", "AGE"]
    assert any(line.split()[:2] == ["cli-one", "c1"] for line in table)
    selected = ok(server.run("herder", "get", "configpatches", "-l", "herder.dev/cluster=c1", "-o", "json"))
    assert [o["metadata"]["name"] for o in json.loads(selected)["items"]] == ["cli-one"]
    one = yaml.safe_load(ok(server.run("herder", "get", "cp", "cli-one", "-o", "yaml")))
    assert one["spec"]["description"] == "second"

    described = ok(server.run("herder", "describe", "cp", "cli-one"))
    for text in ("Name:", "cli-one", "Spec:", "description: second", "Audit events:", "serviceaccount:admin"):
        assert text in described

    assert ok(server.run("herder", "delete", "cp", "cli-one")).strip() == "configpatch/cli-one deleted"
    second = tmp_path / "second.yaml"
    second.write_text(PATCHES.split("---")[1])
    assert ok(server.run("herder", "delete", "-f", str(second))).strip() == "configpatch/cli-two deleted"
    assert "No configpatches found" in ok(server.run("herder", "get", "cp", "-l", "herder.dev/cluster=c1"))


def test_apply_a_directory(server: Server, tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(PATCHES.split("---")[1].replace("cli-two", "dir-a"))
    (tmp_path / "b.yml").write_text(PATCHES.split("---")[1].replace("cli-two", "dir-b"))
    (tmp_path / "notes.txt").write_text("not a manifest")
    assert ok(server.run("herder", "apply", "-f", str(tmp_path))).splitlines() == [
        "configpatch/dir-a created",
        "configpatch/dir-b created",
    ]


def test_serviceaccount_token_is_printed_once_and_works(server: Server, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "ci.kubeconfig"
    created = server.run(
        "herder", "serviceaccount", "create", "ci", "--role", "Reader", "--write-kubeconfig", str(kubeconfig)
    )
    token = ok(created).strip()
    assert token.startswith("hdr_ci-") and "shown this once" in created.stderr
    assert oct(kubeconfig.stat().st_mode & 0o777) == "0o600"
    assert "cli" not in ok(server.run("herder", "get", "ns", kubeconfig=kubeconfig))
    listed = ok(server.run("herder", "serviceaccount", "list"))
    row = next(line.split() for line in listed.splitlines() if line.startswith("ci "))
    assert row[:3] == ["ci", "Reader", "1"]
    second = ok(server.run("herder", "serviceaccount", "token", "ci")).strip()
    assert second.startswith("hdr_ci-") and second != token
    row = next(
        line.split()
        for line in ok(server.run("herder", "serviceaccount", "list")).splitlines()
        if line.startswith("ci ")
    )
    assert row[:3] == ["ci", "Reader", "2"]
    assert token not in listed and token.rpartition("_")[2] not in ok(
        server.run("herder", "get", "tokens", "-o", "yaml")
    )

    refused = one_line_error(server.run("herder", "apply", "-f", "-", stdin=PATCHES, kubeconfig=kubeconfig))
    assert "Forbidden" in refused and "serviceaccount:ci (role Reader) cannot create" in refused
    assert "readable by Admin only" in ok(
        server.run("herder", "describe", "ns", "default", kubeconfig=kubeconfig)
    )

    assert "2 token(s) revoked" in ok(server.run("herder", "serviceaccount", "delete", "ci"))
    gone = one_line_error(server.run("herder", "get", "ns", kubeconfig=kubeconfig))
    assert "Unauthorized" in gone


def test_audit_command_filters(server: Server) -> None:
    ok(
        server.run(
            "herder", "apply", "-f", "-", stdin=PATCHES.split("---")[1].replace("cli-two", "audited-by-cli")
        )
    )
    shown = ok(server.run("herder", "audit", "--kind", "ConfigPatch", "--verb", "create"))
    assert shown.splitlines()[0].split()[:5] == ["TIME", "USER", "ROLE", "VERB", "OBJECT"]
    assert "ConfigPatch default/audited-by-cli" in shown
    assert all(" create " in line for line in shown.splitlines()[1:])
    events = json.loads(ok(server.run("herder", "audit", "--name", "audited-by-cli", "-o", "json")))["items"]
    assert [e["spec"]["verb"] for e in events] == ["create"]


def test_errors_are_one_line(server: Server, tmp_path: Path) -> None:
    assert "unknown kind 'widgets'" in one_line_error(server.run("herder", "get", "widgets"))
    assert "not found" in one_line_error(server.run("herder", "get", "cp", "nothing-here"))
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: herder.dev/v1alpha1\nkind: ConfigPatch\nmetadata: {name: bad}\nspec: {data: '', extra: 1}\n"
    )
    invalid = one_line_error(server.run("herder", "apply", "-f", str(bad)))
    assert "spec.data" in invalid and "spec.extra" in invalid
    assert "cannot read kubeconfig" in one_line_error(
        server.run("herder", "get", "ns", kubeconfig=tmp_path / "none")
    )
    assert "No such file" in one_line_error(
        server.run("herder", "apply", "-f", str(tmp_path / "missing.yaml"))
    )


def test_kubeconfig_is_found_through_env_then_default_data_dir(server: Server, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("HERDER_KUBECONFIG", "KUBECONFIG")}
    by_env = subprocess.run(
        [HERDER, "get", "ns"],
        env={**env, "HERDER_KUBECONFIG": str(server.kubeconfig)},
        capture_output=True,
        text=True,
    )
    assert "default" in ok(by_env)
    # $KUBECONFIG as kubectl users set it: a list, of which the first file that exists is read.
    missing = tmp_path / "missing.kubeconfig"
    by_kubectl_env = subprocess.run(
        [HERDER, "get", "ns"],
        env={**env, "KUBECONFIG": f"{missing}:{server.kubeconfig}"},
        capture_output=True,
        text=True,
    )
    assert "default" in ok(by_kubectl_env)
    # The flag comes first, then $HERDER_KUBECONFIG, then $KUBECONFIG.
    for precedence in (
        [HERDER, "get", "ns", "--kubeconfig", str(server.kubeconfig)],
        [HERDER, "get", "ns"],
    ):
        first = subprocess.run(
            precedence,
            env={**env, "HERDER_KUBECONFIG": str(server.kubeconfig), "KUBECONFIG": str(missing)},
            capture_output=True,
            text=True,
        )
        assert "default" in ok(first)
    assert "cannot read kubeconfig" in one_line_error(
        subprocess.run(
            [HERDER, "get", "ns"], env={**env, "KUBECONFIG": str(missing)}, capture_output=True, text=True
        )
    )
    (tmp_path / "herder").mkdir()
    shutil.copy(server.kubeconfig, tmp_path / "herder" / "admin.kubeconfig")
    by_default = subprocess.run(
        [HERDER, "get", "ns"], env={**env, "XDG_DATA_HOME": str(tmp_path)}, capture_output=True, text=True
    )
    assert "default" in ok(by_default)


def test_every_command_taking_a_kubeconfig_honours_the_environment() -> None:
    """Each --kubeconfig option is resolved through the same precedence (flag, $HERDER_KUBECONFIG,
    $KUBECONFIG), which its help names."""
    import typer
    from typer.main import get_command

    from herder.cli.main import build

    def commands(group: Any, path: str) -> Iterator[tuple[str, Any]]:
        if not hasattr(group, "list_commands"):
            return
        context = typer.Context(group)
        for name in group.list_commands(context):
            command = group.get_command(context, name)
            yield f"{path} {name}", command
            yield from commands(command, f"{path} {name}")

    taking = [
        (path, param)
        for path, command in commands(get_command(build()), "herder")
        for param in command.params
        if "--kubeconfig" in getattr(param, "opts", ())
    ]
    assert len(taking) > 20
    for path, param in taking:
        assert not param.required, path
        if path in ("herder login", "herder logout"):
            # The kubeconfig herder login writes: never $KUBECONFIG, a kubectl user's own file.
            assert "$HERDER_KUBECONFIG, else ~/.config/herder/kubeconfig" in (param.help or ""), path
            continue
        assert "$HERDER_KUBECONFIG, then $KUBECONFIG" in (param.help or ""), path


def test_get_watch_sees_changes(server: Server) -> None:
    watcher = subprocess.Popen(
        [HERDER, "get", "cp", "-w", "--kubeconfig", str(server.kubeconfig)], stdout=subprocess.PIPE, text=True
    )
    try:
        time.sleep(1.5)
        ok(
            server.run(
                "herder", "apply", "-f", "-", stdin=PATCHES.split("---")[1].replace("cli-two", "watched")
            )
        )
        assert watcher.stdout is not None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            line = watcher.stdout.readline()
            if line.split()[:1] == ["watched"]:
                break
        else:
            raise AssertionError("the watch did not show the new object")
    finally:
        stop(watcher)


def free_addresses() -> list[str]:
    """``--listen`` and ``--talos-listen`` on free ports: a test never takes the defaults (8443, 8444),
    which a user's ``make run`` may hold."""
    return ["--listen", f"127.0.0.1:{free_port()}", "--talos-listen", f"127.0.0.1:{free_port()}"]


def test_serve_defaults_and_clean_stop(tmp_path: Path) -> None:
    """Default data dir from XDG_DATA_HOME; SIGINT and SIGTERM both end the server within 3 s, with a
    watch open (which ends as a finished stream), and without a traceback."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        home = tmp_path / sig.name
        process = subprocess.Popen(
            [HERDER, "serve", *free_addresses()],
            env={**os.environ, "XDG_DATA_HOME": str(home)},
            stderr=subprocess.PIPE,
            text=True,
        )
        kubeconfig = home / "herder" / "admin.kubeconfig"
        assert process.stderr is not None
        log = ""
        watch: subprocess.Popen[str] | None = None
        try:
            while "admin kubeconfig:" not in log:
                line = process.stderr.readline()
                assert line, f"herder serve ended early:\n{log}"
                log += line
            watch = subprocess.Popen(
                [KUBECTL, "--kubeconfig", str(kubeconfig), "get", "ns", "-w"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            assert watch.stdout is not None
            assert watch.stdout.readline().split()[:1] == ["NAME"]  # the watch is open
            os.kill(process.pid, sig)
            stopping = time.monotonic()
            assert process.wait(15) == 0
            took = time.monotonic() - stopping
            # The watch saw its stream end: kubectl ends without an error of its own.
            assert watch.wait(10) == 0, watch.stderr.read() if watch.stderr else ""
        finally:
            stop(process)
            if watch is not None:
                stop(watch)
        log += process.stderr.read()
        assert f"admin kubeconfig: {kubeconfig}" in log and "herder stopped" in log
        assert "Traceback" not in log and "timeout graceful shutdown" not in log, log
        assert took < 3, f"{sig.name} took {took:.1f} s"


def demo_addresses() -> list[str]:
    """Everything ``herder demo`` listens on, moved off its defaults (which a user's ``make run`` may
    hold): the API, the Talos gateway, the emulator's control API, its machines and the cluster endpoints."""
    first = random.randrange(20000, 30000, 10)
    return [
        *free_addresses(),
        "--emulator-listen",
        f"127.0.0.1:{free_port()}",
        "--machine-cidr",
        random_cidr(),
        "--cluster-endpoints",
        f"127.0.0.1:{first}-{first + 9}",
    ]


def test_demo_serves_demo_objects(tmp_path: Path) -> None:
    data = tmp_path / "demo"
    log = tmp_path / "demo.log"
    with log.open("w") as errors:
        process = subprocess.Popen(
            [HERDER, "demo", "--data-dir", str(data), *demo_addresses()],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
    try:
        assert process.stdout is not None
        printed = ""
        while "Stop it with Ctrl+C" not in printed:
            line = process.stdout.readline()
            assert line, "the demo ended early"
            printed += line
        assert f"kubectl --kubeconfig {data / 'admin.kubeconfig'} get configpatches" in printed
        listed = subprocess.run(
            ["/usr/bin/kubectl", "--kubeconfig", str(data / "admin.kubeconfig"), "get", "configpatches"],
            capture_output=True,
            text=True,
        )
        names = [line.split()[0] for line in ok(listed).splitlines()[1:]]
        assert "ntp" in names and "audit-policy" in names and "herder-kubespan" not in names
        refused = subprocess.run(
            [
                "/usr/bin/kubectl",
                "--kubeconfig",
                str(data / "viewer.kubeconfig"),
                "delete",
                "configpatch",
                "ntp",
            ],
            capture_output=True,
            text=True,
        )
        assert "Error from server (Forbidden)" in refused.stderr
        # herder forms the demo cluster on the emulator's machines; its kubeconfig reaches its nodes.
        admin = str(data / "admin.kubeconfig")
        waited = subprocess.run(
            [
                "/usr/bin/kubectl",
                "--kubeconfig",
                admin,
                "wait",
                "--for=condition=Ready",
                "cluster/demo",
                "--timeout=120s",
            ],
            capture_output=True,
            text=True,
            timeout=150,
        )
        ok(waited)
        kubeconfig = data / "demo.kubeconfig"
        ok(
            subprocess.run(
                [HERDER, "cluster", "kubeconfig", "demo", "-o", str(kubeconfig), "--kubeconfig", admin],
                capture_output=True,
                text=True,
            )
        )
        nodes = subprocess.run(
            ["/usr/bin/kubectl", "--kubeconfig", str(kubeconfig), "get", "nodes", "--no-headers"],
            capture_output=True,
            text=True,
        )
        statuses = [line.split()[1] for line in ok(nodes).splitlines()]
        assert statuses == ["Ready"] * 5
        # Its workers were made on demand by the emulator's provider, which the demo runs in the server.
        requests = subprocess.run(
            ["/usr/bin/kubectl", "--kubeconfig", admin, "get", "machinerequests", "--no-headers"],
            capture_output=True,
            text=True,
        )
        assert [line.split()[3] for line in ok(requests).splitlines()] == ["Provisioned"] * 2
        # Ctrl+C ends it all (server, emulator, its provider) within 3 s, without a traceback.
        os.kill(process.pid, signal.SIGINT)
        stopping = time.monotonic()
        assert process.wait(15) == 0
        took = time.monotonic() - stopping
    finally:
        stop(process)
    shown = log.read_text()
    assert "Traceback" not in shown and "herder stopped" in shown, shown
    assert took < 3, f"the demo took {took:.1f} s to stop"


def test_serve_with_operator_certificates_and_memory_state(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    files = ensure_tls(certs, ["127.0.0.1"])
    assert files.ca is not None
    flags = (
        "--tls-cert",
        str(files.cert),
        "--tls-key",
        str(files.key),
        "--tls-ca",
        str(files.ca),
        "--state",
        "memory://",
    )
    with running(tmp_path / "data", *flags) as server:
        assert not (server.data_dir / "ca.crt").exists() and not (server.data_dir / "herder.db").exists()
        assert "default" in ok(server.run("kubectl", "get", "ns"))


def test_serve_with_an_encryption_key_file_shared_across_servers(tmp_path: Path) -> None:
    """Two servers, one after the other on one database with one key file, each with its own data
    dir: the second opens what the first sealed (the first's admin token is checked against a
    sealed TokenDigest)."""
    key = tmp_path / "herder.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    flags = ("--state", f"sqlite://{tmp_path / 'shared.db'}", "--encryption-key-file", str(key))
    with running(tmp_path / "first", *flags) as first:
        ok(first.run("herder", "serviceaccount", "create", "ci", "--role", "Reader"))
        token = load(first.kubeconfig).token
    assert token
    with running(tmp_path / "second", *flags) as second:
        as_first_admin = second.kubeconfig_for(token, "first-admin")
        listed = ok(second.run("kubectl", "get", "serviceaccounts", kubeconfig=as_first_admin))
        assert "ci" in listed
    assert not (tmp_path / "first" / "encryption.key").exists()
    assert not (tmp_path / "second" / "encryption.key").exists()


def test_serve_refuses_a_bad_encryption_key_file(tmp_path: Path) -> None:
    readable = tmp_path / "readable.key"
    readable.write_bytes(os.urandom(32))
    readable.chmod(0o644)
    short = tmp_path / "short.key"
    short.write_bytes(os.urandom(31))
    short.chmod(0o600)
    encoded = tmp_path / "encoded.key"
    encoded.write_text(os.urandom(32).hex() + "\n")
    encoded.chmod(0o600)
    for path, reason in (
        (tmp_path / "missing.key", "no such file"),
        (readable, "mode 0644 lets other users read the key; run chmod 600"),
        (short, "holds 31 bytes"),
        (encoded, "holds more than 32 bytes"),
        (tmp_path, "not a regular file"),
    ):
        data = tmp_path / "data"
        result = subprocess.run(
            [HERDER, "serve", "--data-dir", str(data), "--encryption-key-file", str(path), *free_addresses()],
            capture_output=True,
            text=True,
            timeout=30,
        )
        line = one_line_error(result)
        assert f"encryption key file {path}: {reason}" in line, line
        assert not data.exists()


def test_help_names_every_option_in_full_at_80_columns() -> None:
    env = {**os.environ, "COLUMNS": "80"}
    shown = subprocess.run([HERDER, "serve", "--help"], env=env, capture_output=True, text=True, check=True)
    for flag in (
        "--managed-control-planes",
        "--managed-replace-after",
        "--support-token-file",
        "--spare-keys",
    ):
        assert flag in shown.stdout, flag
    assert not re.search(r"--[a-z-]+…", shown.stdout)  # no option name cut short


def test_serve_refuses_fewer_machine_log_bytes_than_it_keeps_at_least(tmp_path: Path) -> None:
    data = tmp_path / "data"
    result = subprocess.run(
        [HERDER, "serve", "--data-dir", str(data), "--machine-log-bytes", "1000", *free_addresses()],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2, result.stderr
    assert "--machine-log-bytes" in result.stderr and "262144" in result.stderr, result.stderr
    assert not data.exists()


@pytest.mark.parametrize(
    ("flags", "said", "code"),
    [
        (("--shards", "4"), "--state etcd://", 1),
        (("--shards", "0"), "--shards", 2),
        (("--shards", "4", "--state", "sqlite:///tmp/x.db"), "--state etcd://", 1),
    ],
)
def test_serve_refuses_shards_it_cannot_share(
    tmp_path: Path, flags: tuple[str, ...], said: str, code: int
) -> None:
    data = tmp_path / "data"
    result = subprocess.run(
        [HERDER, "serve", "--data-dir", str(data), *flags, *free_addresses()],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == code, result.stderr
    assert said in result.stderr, result.stderr
    assert not data.exists()
