"""The real kubectl's server-side apply (as Flux drives it) and ``delete --all`` against a real krm server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.krm.conftest import KUBECTL, Server

pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl is not installed")


def manifest(name: str, labels: dict[str, str] | None = None, **spec: Any) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "herder.dev/v1alpha1",
            "kind": "ConfigPatch",
            "metadata": {"name": name, "labels": labels or {"herder.dev/cluster": "alpha"}},
            "spec": {"data": "machine: {}", **spec},
        }
    )


def get(server: Server, name: str) -> Any:
    return json.loads(server.kubectl("get", "cp", name, "-o", "json", "--show-managed-fields").stdout)


def managers(obj: Any) -> dict[tuple[str, str], Any]:
    return {(e["manager"], e["operation"]): e for e in obj["metadata"].get("managedFields", [])}


def ssa(server: Server, text: str, *args: str, check: bool = True) -> Any:
    return server.kubectl("apply", "--server-side", *args, "-f", "-", input=text, check=check)


def test_server_side_apply_creates_and_updates(server: Server) -> None:
    out = ssa(server, manifest("ssa-made", description="first")).stdout
    assert out.strip() == "configpatch.herder.dev/ssa-made serverside-applied"
    created = get(server, "ssa-made")
    entry = managers(created)[("kubectl", "Apply")]
    assert (
        entry["apiVersion"] == "herder.dev/v1alpha1" and entry["fieldsType"] == "FieldsV1" and entry["time"]
    )
    assert entry["fieldsV1"] == {
        "f:metadata": {"f:labels": {"f:herder.dev/cluster": {}}},
        "f:spec": {"f:data": {}, "f:description": {}},
    }
    ssa(server, manifest("ssa-made", description="second"))
    updated = get(server, "ssa-made")
    assert updated["spec"]["description"] == "second" and updated["metadata"]["generation"] == 2
    # Applying the same configuration again writes nothing.
    ssa(server, manifest("ssa-made", description="second"))
    assert get(server, "ssa-made")["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]
    # kubectl hides managed fields unless asked; the server always sends them.
    shown = yaml.safe_load(server.kubectl("get", "cp", "ssa-made", "-o", "yaml").stdout)
    assert "managedFields" not in shown["metadata"]
    with server.client() as http:
        raw = http.get("/apis/herder.dev/v1alpha1/namespaces/default/configpatches/ssa-made").json()
    assert raw["metadata"]["managedFields"] == updated["metadata"]["managedFields"]


def test_a_second_manager_gets_a_conflict_until_it_forces(server: Server) -> None:
    ssa(server, manifest("ssa-contested", description="mine", data="a: 1"))
    refused = ssa(
        server,
        manifest("ssa-contested", description="theirs", data="a: 2"),
        "--field-manager=flux",
        check=False,
    )
    assert refused.returncode != 0
    assert (
        'Apply failed with 2 conflicts: conflicts with "kubectl":\n- .spec.data\n- .spec.description'
        in refused.stderr
    )
    assert get(server, "ssa-contested")["spec"]["description"] == "mine"
    # The same value is no conflict: both managers own it.
    ssa(server, manifest("ssa-contested", description="mine", data="a: 1"), "--field-manager=flux")
    ssa(
        server,
        manifest("ssa-contested", description="theirs", data="a: 2"),
        "--field-manager=flux",
        "--force-conflicts",
    )
    taken = get(server, "ssa-contested")
    assert (taken["spec"]["description"], taken["spec"]["data"]) == ("theirs", "a: 2")
    owned = managers(taken)
    assert "f:description" in owned[("flux", "Apply")]["fieldsV1"]["f:spec"]
    assert "f:spec" not in owned[("kubectl", "Apply")]["fieldsV1"]  # flux took all it applied
    # kubectl now conflicts with flux, and an edit by other means is an Update entry of its own.
    server.kubectl("label", "cp", "ssa-contested", "extra=yes")
    relabelled = managers(get(server, "ssa-contested"))
    assert relabelled[("kubectl-label", "Update")]["fieldsV1"] == {
        "f:metadata": {"f:labels": {"f:extra": {}}}
    }
    refused = ssa(server, manifest("ssa-contested", description="mine", data="a: 2"), check=False)
    assert 'Apply failed with 1 conflict: conflict with "flux": .spec.description' in refused.stderr


def test_server_dry_run_changes_nothing(server: Server) -> None:
    ssa(server, manifest("ssa-dry", description="live"))
    before = get(server, "ssa-dry")
    out = ssa(server, manifest("ssa-dry", description="drifted"), "--dry-run=server", "-o", "json").stdout
    assert json.loads(out)["spec"]["description"] == "drifted"  # what the apply would make
    out = ssa(server, manifest("ssa-dry-new"), "--dry-run=server").stdout
    assert "serverside-applied (server dry run)" in out
    assert get(server, "ssa-dry") == before
    missing = server.kubectl("get", "cp", "ssa-dry-new", check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr
    # A dry run still refuses conflicts (Flux's drift detection forces, and sees the result).
    refused = ssa(
        server, manifest("ssa-dry", description="x"), "--dry-run=server", "--field-manager=f", check=False
    )
    assert "conflict" in refused.stderr
    forced = ssa(
        server,
        manifest("ssa-dry", description="x"),
        "--dry-run=server",
        "--field-manager=f",
        "--force-conflicts",
        "-o",
        "json",
    )
    assert json.loads(forced.stdout)["spec"]["description"] == "x"
    assert get(server, "ssa-dry") == before


def test_fields_dropped_from_the_configuration_are_removed(server: Server) -> None:
    ssa(server, manifest("ssa-prune", {"a": "1", "b": "2"}, description="d"))
    server.kubectl("label", "cp", "ssa-prune", "c=3")
    ssa(server, manifest("ssa-prune", {"a": "1"}))
    obj = get(server, "ssa-prune")
    # b and description were the applier's alone; c belongs to kubectl-label.
    assert obj["metadata"]["labels"] == {"a": "1", "c": "3"}
    assert obj["spec"].get("description", "") == ""


def test_client_side_apply_then_server_side_apply(server: Server) -> None:
    server.kubectl("apply", "-f", "-", input=manifest("ssa-upgraded", description="csa"))
    assert ("kubectl-client-side-apply", "Update") in managers(get(server, "ssa-upgraded"))
    out = ssa(server, manifest("ssa-upgraded", description="ssa"))
    assert out.returncode == 0, out.stderr
    assert "Warning" not in out.stderr
    obj = get(server, "ssa-upgraded")
    assert obj["spec"]["description"] == "ssa"
    # kubectl moved the client-side apply's fields to its server-side apply manager.
    assert ("kubectl-client-side-apply", "Update") not in managers(obj)
    assert "f:description" in managers(obj)[("kubectl", "Apply")]["fieldsV1"]["f:spec"]
    applied = json.loads(obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert applied["spec"]["description"] == "ssa"


def test_delete_by_label_selector_and_all_deletes_just_those(server: Server) -> None:
    server.kubectl("create", "namespace", "deleting")
    for name, group in (("del-1", "one"), ("del-2", "one"), ("del-3", "two")):
        ssa(server, manifest(name, {"del": group}), "-n", "deleting")
    ssa(server, manifest("del-elsewhere", {"del": "one"}))

    def names(*args: str) -> list[str]:
        return sorted(server.kubectl("get", "cp", "-o", "name", *args).stdout.split())

    # kubectl 1.32 refuses --all beside a selector: -l alone selects.
    out = server.kubectl("delete", "cp", "-n", "deleting", "-l", "del=one").stdout
    assert sorted(out.split("\n")[:-1]) == [
        'configpatch.herder.dev "del-1" deleted',
        'configpatch.herder.dev "del-2" deleted',
    ]
    assert names("-n", "deleting") == ["configpatch.herder.dev/del-3"]
    assert "configpatch.herder.dev/del-elsewhere" in names()
    server.kubectl("delete", "cp", "-n", "deleting", "--all")
    assert names("-n", "deleting") == []
    assert "configpatch.herder.dev/del-elsewhere" in names()
    server.kubectl("delete", "namespace", "deleting")
