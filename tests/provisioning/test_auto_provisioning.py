"""Machines made on demand, end to end on the emulator, driven with kubectl and herder's CLI: a cluster
whose Omni-format template takes its control plane and workers from an auto-provisioning class gets its
requests, machines and a Ready cluster; the template's workers shrink (their machines destroyed); a machine that vanishes in the cloud, and one deleted
in herder, are replaced; power round-trips through status; deleting the cluster leaves nothing behind.

The tests of this module run in order on one site, each starting from where the previous one left off.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from herder.resources.schematic import Customization, Schematic, SystemExtensions
from tests.api.conftest import make_account
from tests.clusters.site import Site
from tests.provisioning.provider_site import (
    condition,
    emu,
    emulated,
    machine_class,
    provisioning_site,
    requests_of,
)

EXTENSIONS = ["siderolabs/iscsi-tools", "siderolabs/util-linux-tools"]
WORKERS = "auto-workers"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with provisioning_site(tmp_path_factory.mktemp("auto")) as (s, _):
        yield s


def _sync_template(site: Site, workers: int) -> None:
    """``herder cluster template sync`` of an Omni-format template whose machines all come from the
    auto-provisioning class ``emulated``, as a user keeps it in Git."""
    documents = [
        {
            "kind": "Cluster",
            "name": "auto",
            "kubernetes": {"version": "v1.33.0"},
            "talos": {"version": "v1.13.9"},
            "systemExtensions": EXTENSIONS,
        },
        {"kind": "ControlPlane", "machineClass": {"name": "emulated", "size": 1}},
        {"kind": "Workers", "machineClass": {"name": "emulated", "size": workers}},
    ]
    path = site.workdir / "auto-template.yaml"
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    site.run("herder", "cluster", "template", "sync", "-f", str(path), timeout=240)


def _machines_of(site: Site, set_name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = site.get(
        "machines", None, "-l", f"herder.dev/machine-request-set={set_name}"
    )["items"]
    return items


def _provisioned(site: Site, set_name: str, count: int) -> list[dict[str, Any]]:
    def check() -> list[dict[str, Any]] | None:
        requests = requests_of(site, set_name)
        done = [r for r in requests if (r.get("status") or {}).get("stage") == "Provisioned"]
        live = [r for r in requests if not r["metadata"].get("deletionTimestamp")]
        return done if len(done) == count == len(live) == len(requests) else None

    found: list[dict[str, Any]] = site.until(
        check, timeout=90, what=f"{count} provisioned requests of {set_name}"
    )
    return found


def test_a_cluster_on_an_auto_provisioning_class_gets_its_machines_and_is_ready(site: Site) -> None:
    site.apply([machine_class("emulated", "emu", cpus=2, memoryMiB=2048, diskGiB=10)])
    _sync_template(site, workers=3)
    site.wait("cluster", "auto", timeout=150)

    requests = _provisioned(site, WORKERS, 3)
    request_set = site.get("machinerequestset", WORKERS)
    assert request_set["spec"]["machineCount"] == 3 and request_set["spec"]["talosVersion"] == "v1.13.9"
    assert request_set["spec"]["schematic"]["extensions"] == EXTENSIONS
    assert condition(request_set, "Ready")["status"] == "True"
    assert all(r["metadata"]["name"].startswith(f"{WORKERS}-") for r in requests)
    assert all(r["metadata"]["labels"]["herder.dev/infra-provider-id"] == "emu" for r in requests)

    machines = {m["metadata"]["name"]: m for m in _machines_of(site, WORKERS)}
    reported = {r["status"]["machine"]["uuid"]: r for r in requests}
    assert set(machines) == set(reported)
    in_cloud = emulated(site)
    for uuid, machine in machines.items():
        labels = machine["metadata"]["labels"]
        assert labels["herder.dev/machine-request"] == reported[uuid]["metadata"]["name"]
        assert labels["herder.dev/infra-provider-id"] == "emu"
        assert labels["herder.dev/cluster"] == "auto"
        assert machine["status"]["connected"] and machine["status"]["hardware"]["cpus"] == 2
        # The emulator made it as asked, of the cluster's Talos version.
        assert in_cloud[uuid]["hardware"]["memory_mib"] == 2048
        assert in_cloud[uuid]["talos_version"] == "v1.13.9"
    assert len(in_cloud) == 4  # 1 control plane and 3 workers, nothing more

    table = site.run(
        "kubectl", "get", "machinerequests", "-l", f"herder.dev/machine-request-set={WORKERS}"
    ).stdout
    assert table.split("\n")[0].split()[:6] == ["NAME", "PROVIDER", "SET", "STAGE", "STEP", "ATTEMPTS"]
    assert table.count("Provisioned") == 3


def test_the_install_image_is_the_schematic_the_provider_booted(site: Site) -> None:
    token = asyncio.run(make_account(site.server, "support", "Support"))
    support = site.server.kubeconfig_for(token, "support")
    uuid = _machines_of(site, WORKERS)[0]["metadata"]["name"]
    shown = site.server.run("kubectl", "get", "clustermachineconfig", uuid, "-o", "json", kubeconfig=support)
    config = next(yaml.safe_load_all(json.loads(shown.stdout)["spec"]["config"]))
    expected = Schematic(
        customization=Customization(systemExtensions=SystemExtensions(officialExtensions=EXTENSIONS))
    ).id()
    assert expected == "613e1592b2da41ae5e265e8789429f22e121aab91cb4deb6bc3c0b6262961245"
    assert config["machine"]["install"]["image"] == f"factory.talos.dev/metal-installer/{expected}:v1.13.9"
    # The provider's own patch of the machine (its network tuning) is layered in as a machine patch.
    assert config["machine"]["sysctls"]["net.core.somaxconn"] == "65535"
    request = site.get("machine", uuid)["metadata"]["labels"]["herder.dev/machine-request"]
    patch = site.get("configpatch", f"net-{request}")
    assert patch["metadata"]["labels"]["herder.dev/machine"] == uuid
    assert patch["metadata"]["labels"]["herder.dev/infra-provider-id"] == "emu"
    assert [r["name"] for r in patch["metadata"]["ownerReferences"]] == [request]


def test_shrinking_the_workers_destroys_their_machines_and_requests(site: Site) -> None:
    before = {m["metadata"]["name"] for m in _machines_of(site, WORKERS)}
    _sync_template(site, workers=1)
    requests = _provisioned(site, WORKERS, 1)
    kept = requests[0]["status"]["machine"]["uuid"]
    site.until(lambda: set(emulated(site)) & before == {kept}, timeout=60, what="two workers destroyed")
    site.until(lambda: {m["metadata"]["name"] for m in _machines_of(site, WORKERS)} == {kept}, timeout=30)
    site.wait("cluster", "auto")
    events = site.run("kubectl", "get", "events", "--field-selector", f"involvedObject.name={WORKERS}").stdout
    assert "ScalingDown" in events


def test_a_machine_that_vanishes_in_the_cloud_is_replaced(site: Site) -> None:
    (request,) = _provisioned(site, WORKERS, 1)
    gone = request["status"]["machine"]["uuid"]
    emu(site, "fault", gone, "vanish")
    site.until(
        lambda: (
            not any(r["metadata"]["name"] == request["metadata"]["name"] for r in requests_of(site, WORKERS))
        ),
        timeout=60,
        what="the request of the vanished machine gone",
    )
    (replacement,) = _provisioned(site, WORKERS, 1)
    assert replacement["status"]["machine"]["uuid"] != gone
    site.until(lambda: gone not in {m["metadata"]["name"] for m in site.get("machines")["items"]}, timeout=60)
    site.wait("cluster", "auto", timeout=120)
    events = site.run("kubectl", "get", "events", "-o", "json").stdout
    assert "MachineGone" in events


def test_a_machine_deleted_in_herder_is_destroyed_and_replaced(site: Site) -> None:
    (request,) = _provisioned(site, WORKERS, 1)
    faulty = request["status"]["machine"]["uuid"]
    site.run("kubectl", "delete", "machine", faulty, "--wait=false")
    site.until(lambda: faulty not in emulated(site), timeout=60, what="the deleted machine destroyed")
    (replacement,) = _provisioned(site, WORKERS, 1)
    assert replacement["status"]["machine"]["uuid"] != faulty
    site.wait("cluster", "auto", timeout=120)


def test_power_off_on_and_reboot_round_trip_through_status(site: Site) -> None:
    (request,) = _provisioned(site, WORKERS, 1)
    uuid = request["status"]["machine"]["uuid"]

    def power(**wanted: Any) -> None:
        site.run(
            "kubectl",
            "patch",
            "machine",
            uuid,
            "--type",
            "merge",
            "-p",
            json.dumps({"spec": {"power": wanted}}),
        )

    def shown() -> dict[str, Any]:
        return dict((site.get("machine", uuid).get("status") or {}).get("power") or {})

    power(on=False)
    site.until(lambda: shown().get("on") is False, timeout=30, what="powered off in status")
    assert emulated(site)[uuid]["power"] == "off"
    # At once: off by its provider's word, it gets none of the grace a machine that should answer gets.
    site.until(lambda: site.stage_of(uuid) == "PoweredOff", timeout=10, what="the machine seen powered off")
    power(on=True)
    site.until(lambda: shown().get("on") is True, timeout=30, what="powered on in status")
    assert emulated(site)[uuid]["power"] == "on"
    power(on=True, rebootRequestID="reboot-1")
    site.until(lambda: shown().get("lastRebootID") == "reboot-1", timeout=30, what="the reboot done")
    site.wait("cluster", "auto", timeout=120)


def test_power_is_refused_for_machines_no_provider_controls(site: Site) -> None:
    site.apply(
        [
            {
                "apiVersion": "herder.dev/v1alpha1",
                "kind": "Machine",
                "metadata": {"name": "by-hand", "namespace": "default"},
                "spec": {"endpoint": "127.0.0.1:9"},
            }
        ]
    )
    refused = site.run(
        "kubectl",
        "patch",
        "machine",
        "by-hand",
        "--type",
        "merge",
        "-p",
        '{"spec": {"power": {"on": false}}}',
        check=False,
    )
    assert (
        refused.returncode != 0
        and "spec.power" in refused.stderr
        and "not from an infra provider" in refused.stderr
    )
    site.run("kubectl", "delete", "machine", "by-hand")


def test_deleting_the_cluster_leaves_no_machine_request_or_finalizer_behind(site: Site) -> None:
    site.run("kubectl", "delete", "cluster", "auto", "--timeout=150s", timeout=200)
    site.until(lambda: not site.get("machinerequests")["items"], timeout=60, what="no machine request left")
    kinds = (
        "machinerequestsets",
        "machines",
        "machinesets",
        "machinesetnodes",
        "clustermachines",
        "configpatches",
    )
    site.until(lambda: not site.get("configpatches")["items"], timeout=30, what="the provider's patches gone")
    for kind in kinds:
        assert site.get(kind)["items"] == [], kind
    site.until(lambda: not emulated(site), timeout=60, what="every emulated machine destroyed")
