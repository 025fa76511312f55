"""What ``herder cluster import`` plans from the machines it read: the Machines (marked with the cluster
they were registered for), the patches that make herder's configs the running ones, then the Cluster
(locked, imported) and its static sets; or, creating nothing, why not, naming the machine and the field.
A create the server refuses part way removes what it made, against a real server."""

from __future__ import annotations

import dataclasses

import pytest

from herder.cli.cluster_import import RunningMachine, create_import, plan_import
from herder.cli.quick import connect_rest
from herder.cli.talos_gen import default_install_image
from herder.talos.contracts import VersionContract
from herder.talos.generate import ConfigInput, GeneratedBundle, generate_bundle
from herder.talos.secrets import load_secrets
from tests.api.server import Server
from tests.controllers.site import secrets_bundle

TALOS = "v1.13.9"


def _formed(disk: str = "/dev/sda") -> GeneratedBundle:
    """The configs of a cluster formed with ``herder talos gen config india https://10.5.0.1:6443``."""
    return generate_bundle(
        ConfigInput(
            cluster_name="india",
            endpoint="https://10.5.0.1:6443",
            kubernetes_version="1.33.0",
            contract=VersionContract.parse(TALOS),
            secrets=load_secrets(secrets_bundle("1.13"), check_keys=False),
            install_disk=disk,
            install_image=default_install_image(TALOS),
        )
    )


def _machines(bundle: GeneratedBundle) -> list[RunningMachine]:
    return [
        RunningMachine("cp-1", "10.5.0.1:50000", TALOS, bundle.controlplane),
        RunningMachine("w-1", "10.5.0.2:50000", TALOS, bundle.worker),
    ]


def test_a_cluster_formed_outside_herder_is_planned_with_the_cluster_after_what_it_acts_on() -> None:
    plan = plan_import(_machines(_formed()))
    assert plan.errors == []
    assert [(o["kind"], o["metadata"]["name"]) for o in plan.objects] == [
        ("Machine", "cp-1"),
        ("Machine", "w-1"),
        ("ConfigPatch", "india-import-0-cp-1"),
        ("Cluster", "india"),
        ("MachineSet", "india-control-planes"),
        ("MachineSet", "india-workers"),
    ]
    machine, patch, cluster, control_planes = (plan.objects[i] for i in (0, 2, 3, 4))
    assert machine["metadata"]["annotations"] == {"herder.dev/imported": "india"}
    assert machine["spec"] == {"endpoint": "10.5.0.1:50000"}
    assert patch["metadata"]["labels"] == {
        "herder.dev/cluster": "india",
        "herder.dev/cluster-machine": "cp-1",
    }
    assert cluster["metadata"]["annotations"] == {
        "herder.dev/locked": "true",
        "herder.dev/imported": "talosconfig",
    }
    assert cluster["spec"] == {
        "talosVersion": TALOS,
        "kubernetesVersion": "1.33.0",
        "endpoint": "https://10.5.0.1:6443",
    }
    assert control_planes["spec"] == {"role": "controlplane", "machines": ["cp-1"]}
    # herder's own Readers binding is not in the running config: the patch takes it out, and says so.
    assert plan.differences == {"cp-1": ["cluster.inlineManifests"], "w-1": []}
    assert plan.contract == "1.13"
    assert load_secrets(plan.bundle, check_keys=False) == load_secrets(
        secrets_bundle("1.13"), check_keys=False
    )


def test_another_name_than_the_talos_clusters_is_refused() -> None:
    plan = plan_import(_machines(_formed()), name="other")
    assert plan.objects == []
    assert plan.errors == [
        "--name other: the Talos cluster is named 'india' (cluster.clusterName), and an imported Cluster "
        "takes that name: leave --name out"
    ]
    assert plan_import(_machines(_formed()), name="india").errors == []


def test_what_herder_owns_and_a_machine_runs_otherwise_is_refused_naming_the_machine_and_field() -> None:
    plan = plan_import(_machines(_formed(disk="/dev/vda")))
    assert plan.errors == [
        f"machine {uuid}: cannot reproduce its config: config patch 'india-import-0-{uuid}' may not change "
        "machine.install.disk"
        for uuid in ("cp-1", "w-1")
    ]
    assert not [o for o in plan.objects if o["kind"] == "ConfigPatch"]


def test_machines_without_a_control_plane_or_on_mixed_versions_are_refused() -> None:
    cp, worker = _machines(_formed())
    assert plan_import([worker]).errors == [
        "no control plane among the machines: the secrets bundle is read from one"
    ]
    mixed = plan_import([cp, dataclasses.replace(worker, talos_version="v1.13.8")])
    assert mixed.errors == ["the machines run different Talos versions (v1.13.8, v1.13.9)"]


def test_a_failed_import_removes_what_it_made_the_cluster_as_an_abort_does(server: Server) -> None:
    plan = plan_import(_machines(_formed()))
    # A second control plane set, which the server refuses after the Cluster and its sets were made.
    refused = {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "MachineSet",
        "metadata": {
            "name": "india-refused",
            "namespace": "default",
            "labels": {"herder.dev/cluster": "india"},
        },
        "spec": {"role": "controlplane", "machines": ["cp-1"]},
    }
    plan.objects.append(refused)
    with connect_rest(server.kubeconfig) as rest:
        with pytest.raises(
            ValueError,
            match=r"a cluster has one control plane set\] \(what the import made was removed again\)$",
        ):
            create_import(rest, plan, "default")
        for kind in ("clusters", "machinesets", "clustermachines", "configpatches", "machines"):
            listed = rest.request("GET", rest.kind(kind).path("default"))["items"]
            assert [o["metadata"]["name"] for o in listed] == [], kind
