"""A cluster's whole life on the emulator, driven as a user drives it, in steps: registered machines, a
Cluster and its machine sets applied with kubectl, ``kubectl wait`` for Ready, the cluster's own kubeconfig
showing its nodes, a worker set shrunk, a control plane replaced with etcd healthy, and the cluster deleted
with every machine back in maintenance mode."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.api.server import KUBECTL
from tests.clusters.site import Site, cluster, machine_class, machine_set, running_site

pytestmark = pytest.mark.steps


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with running_site(tmp_path_factory.mktemp("lifecycle"), 7) as s:
        yield s


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == kind), {})


def _nodes(site: Site, kubeconfig: Path) -> list[tuple[str, str]]:
    out = subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), "get", "nodes", "--no-headers"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return [(line.split()[0], line.split()[1]) for line in out.stdout.splitlines() if line.strip()]


@dataclass(frozen=True)
class Roles:
    """Which of the emulator's seven machines plays which part."""

    control_planes: list[str]
    pool: list[str]
    spare: str

    @classmethod
    def of(cls, site: Site) -> Roles:
        machines = [m["uuid"] for m in site.machines]
        return cls(machines[:3], machines[3:5], machines[5])


def test_a_cluster_of_listed_and_class_machines_becomes_ready(site: Site) -> None:
    roles = Roles.of(site)
    assert len(site.get("machines")["items"]) == 7
    for uuid in roles.pool:
        site.run("kubectl", "label", "machine", uuid, "pool=workers")
    site.apply(
        [
            cluster("alpha"),
            machine_class("workers", {"pool": "workers"}),
            machine_set("alpha", "alpha-control-planes", "controlplane", machines=roles.control_planes),
            machine_set("alpha", "alpha-workers", "worker", machineClass={"name": "workers", "size": 2}),
        ]
    )
    site.wait("cluster", "alpha", timeout=120)


def test_its_kubeconfig_shows_five_ready_nodes(site: Site) -> None:
    kubeconfig = site.workdir / "alpha.kubeconfig"
    site.run("herder", "cluster", "kubeconfig", "alpha", "-o", str(kubeconfig))
    nodes = site.until(lambda: (n := _nodes(site, kubeconfig)) and len(n) == 5 and n, what="5 nodes")
    assert all(status == "Ready" for _, status in nodes), nodes


def test_its_status_counts_its_machines_and_its_events_tell_its_story(site: Site) -> None:
    status = site.get("cluster", "alpha")["status"]
    assert status["machines"] == {"total": 5, "ready": 5, "wanted": 5}
    assert status["talosContract"] == "1.13"
    assert {c["type"] for c in status["conditions"]} >= {
        "Ready",
        "ControlPlaneReady",
        "EtcdHealthy",
        "KubernetesAPIReady",
    }
    events = site.run("kubectl", "get", "events", "--field-selector", "involvedObject.name=alpha").stdout
    assert "Bootstrapped" in events and "SecretsGenerated" in events
    labelled = site.get("machines", None, "-l", "herder.dev/cluster=alpha")["items"]
    assert len(labelled) == 5


def test_a_shrunk_worker_set_gives_a_machine_back_in_maintenance(site: Site) -> None:
    pool = Roles.of(site).pool
    site.run(
        "kubectl",
        "patch",
        "machineset",
        "alpha-workers",
        "--type",
        "merge",
        "-p",
        '{"spec": {"machineClass": {"name": "workers", "size": 1}}}',
    )
    freed = site.until(
        lambda: [
            u
            for u in pool
            if site.stage_of(u) == "Maintenance"
            and "herder.dev/cluster" not in (site.get("machine", u)["metadata"].get("labels") or {})
        ],
        timeout=60,
        what="a worker back in maintenance",
    )
    assert len(freed) == 1
    site.wait("cluster", "alpha")


def test_a_replaced_control_plane_leaves_after_its_replacement_with_etcd_healthy(site: Site) -> None:
    roles = Roles.of(site)
    kept, replaced = roles.control_planes[:2], roles.control_planes[2]
    site.run(
        "kubectl",
        "patch",
        "machineset",
        "alpha-control-planes",
        "--type",
        "merge",
        "-p",
        f'{{"spec": {{"machines": ["{kept[0]}", "{kept[1]}", "{roles.spare}"]}}}}',
    )
    site.until(
        lambda: site.stage_of(replaced) == "Maintenance", timeout=90, what="the replaced control plane reset"
    )
    site.wait("cluster", "alpha")
    # The cluster's summary settles a moment after what it reads (etcd measured through the new members).
    site.until(
        lambda: _condition(site.get("cluster", "alpha"), "EtcdHealthy")["status"] == "True",
        timeout=60,
        what="etcd healthy with the replacement",
    )
    members = {
        m["metadata"]["name"]
        for m in site.get("clustermachines", None, "-l", "herder.dev/cluster=alpha")["items"]
    }
    assert roles.spare in members and replaced not in members


def test_deleting_the_cluster_resets_every_machine_and_removes_its_objects(site: Site) -> None:
    roles = Roles.of(site)
    site.run("kubectl", "delete", "cluster", "alpha", "--timeout=120s", timeout=180)
    for kind in ("machinesets", "machinesetnodes", "clustermachines"):
        assert site.get(kind, None, "-l", "herder.dev/cluster=alpha")["items"] == []
    in_use = [*roles.control_planes[:2], roles.spare, *roles.pool]
    site.until(
        lambda: all(site.stage_of(u) == "Maintenance" for u in in_use), timeout=60, what="all in maintenance"
    )
    assert not site.get("machines", None, "-l", "herder.dev/cluster")["items"]
