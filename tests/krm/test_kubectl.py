"""The real kubectl (v1.32, through the SDK's dispatcher) against a real krm server."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.krm.conftest import KUBECTL, Server
from tests.krm.policies import LOCKED

pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl is not installed")


def manifest(name: str, description: str = "", **spec: Any) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "herder.dev/v1alpha1",
            "kind": "ConfigPatch",
            "metadata": {"name": name, "labels": {"herder.dev/cluster": "alpha"}},
            "spec": {"data": "machine: {}", "description": description, **spec},
        }
    )


def get_json(server: Server, *args: str) -> Any:
    return json.loads(server.kubectl("get", *args, "-o", "json").stdout)


def test_api_resources(server: Server) -> None:
    out = server.kubectl("api-resources").stdout
    lines = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert lines["configpatches"] == ["configpatches", "cp", "herder.dev/v1alpha1", "true", "ConfigPatch"]
    assert lines["namespaces"] == ["namespaces", "ns", "v1", "false", "Namespace"]
    assert "clustersecrets" in lines
    herder_only = server.kubectl("api-resources", "--categories=herder", "-o", "name").stdout.split()
    assert "configpatches.herder.dev" in herder_only and "namespaces" not in herder_only


def test_apply_creates_then_updates(server: Server) -> None:
    out = server.kubectl("apply", "-f", "-", input=manifest("applied", "first")).stdout
    assert out.strip() == "configpatch.herder.dev/applied created"
    out = server.kubectl("apply", "-f", "-", input=manifest("applied", "second")).stdout
    assert out.strip() == "configpatch.herder.dev/applied configured"
    obj = get_json(server, "configpatch", "applied")
    assert obj["spec"]["description"] == "second"
    assert obj["metadata"]["generation"] == 2
    out = server.kubectl("apply", "-f", "-", input=manifest("applied", "second")).stdout
    assert out.strip() == "configpatch.herder.dev/applied unchanged"


def test_get_prints_the_kinds_columns(server: Server) -> None:
    server.kubectl("apply", "-f", "-", input=manifest("columns", "shown when wide"))
    header, *rows = server.kubectl("get", "cp").stdout.splitlines()
    assert header.split() == ["NAME", "CLUSTER", "AGE"]
    assert any(r.split()[:2] == ["columns", "alpha"] for r in rows)
    header, *rows = server.kubectl("get", "cp", "columns", "-o", "wide").stdout.splitlines()
    assert header.split() == ["NAME", "CLUSTER", "DESCRIPTION", "AGE"]
    assert rows[0].split()[:5] == ["columns", "alpha", "shown", "when", "wide"]
    header, *rows = server.kubectl("get", "ns").stdout.splitlines()
    assert header.split() == ["NAME", "STATUS", "AGE"]
    assert rows[0].split()[:2] == ["default", "Active"]
    labels = server.kubectl("get", "cp", "columns", "--show-labels").stdout
    assert "herder.dev/cluster=alpha" in labels


def test_get_yaml(server: Server) -> None:
    server.kubectl("apply", "-f", "-", input=manifest("as-yaml"))
    obj = yaml.safe_load(server.kubectl("get", "configpatches.herder.dev", "as-yaml", "-o", "yaml").stdout)
    assert obj["kind"] == "ConfigPatch" and obj["metadata"]["namespace"] == "default"
    assert obj["spec"]["data"] == "machine: {}"
    assert int(obj["metadata"]["resourceVersion"]) > 0 and obj["metadata"]["uid"]


def _reader(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _wait_for(lines: queue.Queue[str], text: str, timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        seen.append(line)
        if text in line:
            return line
    raise AssertionError(f"{text!r} not seen; got {seen}")


def test_get_watch_sees_another_clients_change(server: Server) -> None:
    server.kubectl("apply", "-f", "-", input=manifest("watched", "before"))
    proc = subprocess.Popen(
        [*server.kubectl_command("get", "cp", "-w", "-o", "wide"), "--request-timeout=0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = _reader(proc)
        _wait_for(lines, "before")
        with server.client() as client:
            response = client.patch(
                "/apis/herder.dev/v1alpha1/namespaces/default/configpatches/watched",
                content=json.dumps({"spec": {"description": "after"}}),
                headers={"content-type": "application/merge-patch+json"},
            )
            assert response.status_code == 200
        assert _wait_for(lines, "after").split()[:3] == ["watched", "alpha", "after"]
        server.kubectl("apply", "-f", "-", input=manifest("watched-new"))
        _wait_for(lines, "watched-new")
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(10)


def test_label_and_annotate(server: Server) -> None:
    server.kubectl("apply", "-f", "-", input=manifest("tagged"))
    assert "labeled" in server.kubectl("label", "cp", "tagged", "tier=gold").stdout
    assert "annotated" in server.kubectl("annotate", "cp", "tagged", "note=hello world").stdout
    meta = get_json(server, "cp", "tagged")["metadata"]
    assert meta["labels"]["tier"] == "gold" and meta["annotations"]["note"] == "hello world"
    server.kubectl("label", "cp", "tagged", "tier-")
    assert "tier" not in get_json(server, "cp", "tagged")["metadata"]["labels"]
    assert get_json(server, "cp", "-l", "herder.dev/cluster=alpha,tier!=gold")["items"]
    # Namespace is a core kind: kubectl labels it with a strategic merge patch.
    server.kubectl("label", "ns", "default", "team=platform", "--overwrite")
    assert get_json(server, "ns", "default")["metadata"]["labels"]["team"] == "platform"


def test_patch_merge_and_json(server: Server) -> None:
    server.kubectl("apply", "-f", "-", input=manifest("patched"))
    server.kubectl("patch", "cp", "patched", "--type", "merge", "-p", '{"spec":{"description":"merged"}}')
    assert get_json(server, "cp", "patched")["spec"]["description"] == "merged"
    ops = '[{"op":"replace","path":"/spec/data","value":"cluster: {}"}]'
    server.kubectl("patch", "cp", "patched", "--type", "json", "-p", ops)
    assert get_json(server, "cp", "patched")["spec"]["data"] == "cluster: {}"
    failed = server.kubectl(
        "patch", "cp", "patched", "--type", "json", "-p", '[{"op":"remove","path":"/nope"}]', check=False
    )
    assert failed.returncode != 0 and "the JSON patch does not apply" in failed.stderr


def test_delete_and_finalizers(server: Server) -> None:
    server.kubectl("apply", "-f", "-", input=manifest("doomed"))
    assert (
        server.kubectl("delete", "cp", "doomed").stdout.strip() == 'configpatch.herder.dev "doomed" deleted'
    )
    gone = server.kubectl("get", "cp", "doomed", check=False)
    assert gone.returncode != 0
    assert 'Error from server (NotFound): configpatches.herder.dev "doomed" not found' in gone.stderr

    held = yaml.safe_load(manifest("held"))
    held["metadata"]["finalizers"] = ["test.herder.dev/hold"]
    server.kubectl("apply", "-f", "-", input=yaml.safe_dump(held))
    server.kubectl("delete", "cp", "held", "--wait=false")
    obj = get_json(server, "cp", "held")
    assert obj["metadata"]["deletionTimestamp"]
    server.kubectl("patch", "cp", "held", "--type", "merge", "-p", '{"metadata":{"finalizers":null}}')
    assert server.kubectl("get", "cp", "held", check=False).returncode != 0


def test_explain(server: Server) -> None:
    out = server.kubectl("explain", "configpatches").stdout
    assert "KIND:       ConfigPatch" in out and "herder.dev" in out
    assert "A Talos machine config patch" in out
    spec = server.kubectl("explain", "cp.spec").stdout
    assert "data\t<string> -required-" in spec and "the patch document(s), YAML" in spec
    field = server.kubectl("explain", "cp.spec.data").stdout
    assert "FIELD: data <string>" in field
    assert "labels" in server.kubectl("explain", "cp.metadata").stdout


def test_invalid_manifest_is_refused_naming_the_fields(server: Server) -> None:
    unknown = server.kubectl("apply", "-f", "-", input=manifest("unknown-field", bogus="x"), check=False)
    assert unknown.returncode != 0
    assert "spec.bogus" in unknown.stderr and "unknown field" in unknown.stderr
    bad = yaml.safe_load(manifest("bad-value"))
    bad["spec"]["data"] = ""
    invalid = server.kubectl("apply", "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert invalid.returncode != 0
    assert 'The ConfigPatch "bad-value" is invalid' in invalid.stderr and "spec.data" in invalid.stderr
    assert server.kubectl("get", "cp", "bad-value", check=False).returncode != 0
    # Asked to warn, the server drops unknown fields and kubectl shows its warnings.
    warned = server.kubectl("apply", "--validate=warn", "-f", "-", input=manifest("warned", bogus="x"))
    assert 'Warning: unknown field "spec.bogus"' in warned.stderr
    # With validation off, kubectl asks the server to drop unknown fields.
    server.kubectl("apply", "--validate=false", "-f", "-", input=manifest("unknown-field", bogus="x"))
    assert "bogus" not in get_json(server, "cp", "unknown-field")["spec"]


def test_forbidden_action(guarded_server: Server) -> None:
    locked = yaml.safe_load(manifest("locked"))
    locked["metadata"]["labels"][LOCKED] = "true"
    denied = guarded_server.kubectl("apply", "-f", "-", input=yaml.safe_dump(locked), check=False)
    assert denied.returncode != 0
    assert (
        "Error from server (Forbidden)" in denied.stderr
        and "may not create locked configpatches" in denied.stderr
    )
    guarded_server.kubectl("apply", "-f", "-", input=manifest("lockable"))
    denied = guarded_server.kubectl("label", "cp", "lockable", f"{LOCKED}=true", check=False)
    assert "Error from server (Forbidden)" in denied.stderr


def test_unauthenticated(guarded_server: Server) -> None:
    refused = guarded_server.kubectl("get", "cp", "--token=bad", check=False)
    assert refused.returncode != 0
    assert "error: You must be logged in to the server" in refused.stderr
