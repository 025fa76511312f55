"""Bad cluster input gets 422 naming the field and the reason (or 409 for a deletion that must not
happen), through the real kubectl, before anything is made: versions outside the policy, a machine in two
sets, an unknown class, a second control plane set, a listed machine that does not exist."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.api.server import Server, running
from tests.clusters.site import cluster, machine_class, machine_set


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running(tmp_path_factory.mktemp("validation") / "data") as s:
        machines = [
            {
                "apiVersion": "herder.dev/v1alpha1",
                "kind": "Machine",
                "metadata": {"name": f"m{i}", "namespace": "default"},
                "spec": {"endpoint": f"127.0.0.1:{9 + i}"},
            }
            for i in range(4)
        ]
        _apply(s, [cluster("bravo"), *machines, machine_class("pool", {"pool": "a"})])
        _apply(s, [machine_set("bravo", "bravo-workers", "worker", machines=["m0"])])
        yield s


def _apply(server: Server, documents: list[dict[str, Any]], *flags: str) -> subprocess.CompletedProcess[str]:
    path = server.data_dir.parent / "doc.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    return server.run("kubectl", "apply", "-f", str(path), *flags)


def _refused(server: Server, document: dict[str, Any]) -> str:
    result = _apply(server, [document], "--dry-run=server")
    assert result.returncode != 0, result.stdout
    return result.stderr


def test_versions_outside_the_policy_are_refused(server: Server) -> None:
    error = _refused(server, cluster("c1", talos="v1.8.0"))
    assert "spec.talosVersion" in error and "unsupported Talos version" in error
    error = _refused(server, cluster("c2", kubernetes="1.20.0"))
    assert "spec.kubernetesVersion" in error and "not supported by Talos" in error
    error = _refused(server, cluster("c3", talos="1.13"))
    assert "spec.talosVersion" in error and "expected X.Y.Z" in error
    # Each example is of its own kind of version, and the reason is said as it is (pydantic's "Value
    # error, " prefix is not the user's business).
    error = _refused(server, cluster("c4", kubernetes="v1.33.x"))
    assert (
        "spec.kubernetesVersion: invalid Kubernetes version 'v1.33.x': expected X.Y.Z, e.g. 1.33.0" in error
    )
    assert "Value error" not in error


def test_an_upgrade_path_talos_does_not_allow_is_refused(server: Server) -> None:
    two_minors = cluster("bravo", kubernetes="1.35.0")
    error = _refused(server, two_minors)
    assert "spec.kubernetesVersion" in error and "one minor version at a time" in error
    below = cluster("bravo", talos="v1.12.0")
    error = _refused(server, below)
    assert "spec.talosVersion" in error and "cannot go below" in error


def test_a_machine_in_two_sets_is_refused(server: Server) -> None:
    _apply(server, [cluster("charlie")])
    error = _refused(server, machine_set("charlie", "charlie-workers", "worker", machines=["m0"]))
    assert "spec.machines[0]" in error and "already in machine set bravo-workers" in error


def test_a_listed_machine_must_be_registered(server: Server) -> None:
    error = _refused(server, machine_set("bravo", "bravo-more", "worker", machines=["m1", "ghost"]))
    assert "spec.machines[1]" in error and "machine ghost is not registered" in error


def test_an_unknown_class_is_refused(server: Server) -> None:
    error = _refused(
        server, machine_set("bravo", "bravo-pool", "worker", machineClass={"name": "nope", "size": 1})
    )
    assert "spec.machineClass.name" in error and "machine class nope does not exist" in error


def test_one_control_plane_set_per_cluster(server: Server) -> None:
    error = _refused(server, machine_set("bravo", "bravo-other-cps", "controlplane", machines=["m2"]))
    assert "metadata.name" in error and "bravo-control-planes" in error
    error = _refused(server, machine_set("bravo", "bravo-control-planes", "worker", machines=["m2"]))
    assert "spec.role" in error


def test_a_set_needs_an_existing_cluster(server: Server) -> None:
    error = _refused(server, machine_set("nowhere", "nowhere-workers", "worker", machines=["m3"]))
    assert "metadata.labels.herder.dev/cluster" in error and "cluster nowhere does not exist" in error
    unlabelled = machine_set("bravo", "stray", "worker")
    del unlabelled["metadata"]["labels"]
    assert "is required" in _refused(server, unlabelled)


def test_bad_fields_name_the_field(server: Server) -> None:
    error = _refused(
        server, machine_set("bravo", "bravo-x", "worker", machines=["m1"], machineClass={"name": "pool"})
    )
    assert "from one source" in error
    error = _refused(server, machine_set("bravo", "bravo-y", "boss"))
    assert "spec.role" in error
    status = json.loads(server.run("kubectl", "get", "cluster", "bravo", "-o", "json").stdout)
    assert status["spec"]["talosVersion"] == "v1.13.9"


def test_a_used_class_cannot_be_deleted(server: Server) -> None:
    _apply(server, [machine_set("bravo", "bravo-pool", "worker", machineClass={"name": "pool", "size": 0})])
    result = server.run("kubectl", "delete", "machineclass", "pool", "--dry-run=server")
    assert result.returncode != 0 and "used by machine set(s) bravo-pool" in result.stderr
