"""Registering machines with ``herder machine add``, as an Admin does: herder reaches each endpoint in
maintenance mode, names the Machine by the UUID the machine reports and shows what it learnt; what cannot
be registered says why; only herder says which cluster a machine is in."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.api.conftest import make_account
from tests.clusters.site import Site, running_site


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with running_site(tmp_path_factory.mktemp("machines"), 3, register=False) as s:
        yield s


def test_machine_add_registers_by_uuid_with_hardware(site: Site) -> None:
    first, second = site.machines[:2]
    host = first["endpoint"].rsplit(":", 1)[0]
    added = site.run("herder", "machine", "add", host, second["endpoint"])
    assert sorted(added.stdout.split()) == sorted(
        [first["uuid"], first["endpoint"], second["uuid"], second["endpoint"]]
    )
    # The link writes what it read of the machine, then its stage as the watch tells it: wait for both.
    machine = site.until(
        lambda: (
            (m := site.get("machine", first["uuid"])).get("status", {}).get("hardware")
            and m["status"].get("stage") == "Maintenance"
            and m
        ),
        what="the machine's hardware and stage",
    )
    assert machine["spec"]["endpoint"] == first["endpoint"]
    status = machine["status"]
    assert status["connected"] and status["stage"] == "Maintenance" and status["maintenance"]
    assert status["hardware"]["cpus"] > 0 and status["hardware"]["memoryMiB"] > 0
    assert status["hardware"]["disks"][0]["name"].startswith("/dev/")
    assert host in status["addresses"]
    # Adding again is harmless.
    assert site.run("herder", "machine", "add", host).stdout.split() == [first["uuid"], first["endpoint"]]


def test_an_endpoint_that_does_not_answer_says_why(site: Site) -> None:
    prefix = site.machines[0]["endpoint"].rsplit(".", 1)[0]
    silent = f"{prefix}.250"
    result = site.run("herder", "machine", "add", silent, "--wait", "3", check=False)
    assert result.returncode == 1
    assert f"{silent}:50000" in result.stderr and "cannot reach" in result.stderr
    registration = site.get("machineregistration", silent.replace(".", "-") + "-50000")
    assert registration["status"]["attempts"] >= 1
    ready = next(c for c in registration["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and "cannot reach" in ready["message"]


def test_bad_endpoints_are_refused_before_anything_is_sent(site: Site) -> None:
    result = site.run("herder", "machine", "add", "not an endpoint", check=False)
    assert result.returncode == 1 and "invalid endpoint" in result.stderr


def test_only_herder_says_which_cluster_a_machine_is_in(site: Site) -> None:
    uuid = site.machines[2]["uuid"]
    site.run("herder", "machine", "add", site.machines[2]["endpoint"])
    site.run("kubectl", "label", "machine", uuid, "pool=a")
    refused = site.run("kubectl", "label", "machine", uuid, "herder.dev/cluster=x", check=False)
    assert refused.returncode != 0 and "set by herder" in refused.stderr
    assert site.get("machine", uuid)["metadata"]["labels"] == {"pool": "a"}


def test_release_needs_force_and_an_admin(site: Site) -> None:
    uuid = site.machines[0]["uuid"]
    refused = site.run("herder", "machine", "release", uuid, check=False)
    assert refused.returncode == 1 and "--force" in refused.stderr
    token = asyncio.run(make_account(site.server, "machine-operator", "Operator"))
    operator = site.server.kubeconfig_for(token, "machine-operator")
    denied = site.server.run("herder", "machine", "release", uuid, "--force", kubeconfig=operator)
    assert denied.returncode == 1 and "herder.dev/force-release" in denied.stderr
    site.run("herder", "machine", "release", uuid, "--force")
