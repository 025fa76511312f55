"""A cluster lock on the emulator, as a user drives it with herder's CLI and kubectl: ``herder cluster lock``
(Operator on the cluster, audited; a Reader is refused) shows the condition Locked; a Talos upgrade and a
config patch wait, with no machine re-applied or rebooted, until ``herder cluster unlock``; a delete of a
locked cluster waits, named on the condition, and goes once unlocked."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.server import HERDER
from tests.clusters.site import Site, cluster, machine_set, running_site

pytestmark = pytest.mark.steps

FROM, TO = "v1.13.9", "v1.14.1"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with running_site(tmp_path_factory.mktemp("lock"), 2) as s:
        machines = [m["uuid"] for m in s.machines]
        s.apply(
            [
                cluster("lima", talos=FROM),
                machine_set("lima", "lima-control-planes", "controlplane", machines=machines[:1]),
                machine_set("lima", "lima-workers", "worker", machines=machines[1:]),
            ]
        )
        s.wait("cluster", "lima", timeout=180)
        yield s


def _counts(site: Site) -> dict[str, tuple[int, int]]:
    """Each emulated machine's (boots, configApplies), as ``herder emu machines -o json`` shows them."""
    machines = asyncio.run(site.emulator.control("GET", "/machines"))
    return {m["uuid"]: (m["boots"], m["configApplies"]) for m in machines}


def _condition(site: Site, kind: str) -> dict[str, Any] | None:
    conditions = (site.get("cluster", "lima").get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), None)


def test_a_reader_may_not_lock_the_cluster(site: Site) -> None:
    config = site.workdir / "reader.kubeconfig"
    site.run(
        "herder", "serviceaccount", "create", "rita", "--role", "Reader", "--write-kubeconfig", str(config)
    )
    refused = subprocess.run(
        [HERDER, "cluster", "lock", "lima", "--kubeconfig", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0
    assert _condition(site, "Locked") is None


def test_locking_shows_the_condition_and_is_audited(site: Site) -> None:
    locked = site.run("herder", "cluster", "lock", "lima")
    assert "locked" in locked.stdout
    site.wait("cluster", "lima", "Locked", timeout=30)
    condition = _condition(site, "Locked")
    assert condition is not None and condition["reason"] == "Locked"
    assert "herder cluster unlock lima" in condition["message"]
    events = site.get("auditevents")["items"]
    patches = [
        e["spec"]
        for e in events
        if e["spec"]["kind"] == "Cluster" and e["spec"]["name"] == "lima" and e["spec"]["verb"] == "patch"
    ]
    assert patches and patches[-1]["result"] == "Success"


def test_a_locked_cluster_upgrades_and_reconfigures_nothing(site: Site) -> None:
    before = _counts(site)
    site.run(
        "kubectl",
        "patch",
        "cluster",
        "lima",
        "--type",
        "merge",
        "-p",
        f'{{"spec": {{"talosVersion": "{TO}"}}}}',
    )
    site.apply(
        [
            {
                "apiVersion": "herder.dev/v1alpha1",
                "kind": "ConfigPatch",
                "metadata": {
                    "name": "lima-motd",
                    "namespace": "default",
                    "labels": {"herder.dev/cluster": "lima"},
                },
                "spec": {"data": "machine:\n  sysctls:\n    kernel.domainname: lima.example\n"},
            }
        ]
    )

    def waiting() -> dict[str, Any] | None:
        rollouts = (site.get("cluster", "lima").get("status") or {}).get("rollouts") or []
        talos = next((r for r in rollouts if r["kind"] == "Talos"), None)
        return talos if talos is not None and "is locked" in talos["message"] else None

    rollout = site.until(waiting, timeout=60, what="the Talos rollout to wait for the lock")
    assert rollout["state"] == "Rolling" and rollout["done"] == 0
    time.sleep(5)  # long enough for an apply or an upgrade to have started, were the cluster not locked
    assert _counts(site) == before
    members = site.get("clustermachines", None, "-l", "herder.dev/cluster=lima")["items"]
    assert all(m["spec"]["talosVersion"] == FROM and m["status"]["talosVersion"] == FROM for m in members)
    # Status is still observed: the machines are seen running and the cluster stays Ready.
    assert all(m["status"]["ready"] for m in members)
    ready = _condition(site, "Ready")
    assert ready is not None and ready["status"] == "True"


def test_unlocking_lets_the_upgrade_and_the_patch_go(site: Site) -> None:
    unlocked = site.run("herder", "cluster", "unlock", "lima")
    assert "unlocked" in unlocked.stdout
    site.until(
        lambda: all(
            (m.get("status") or {}).get("talosVersion") == TO
            for m in site.get("clustermachines", None, "-l", "herder.dev/cluster=lima")["items"]
        ),
        timeout=240,
        what=f"every machine on {TO}",
    )
    site.wait("cluster", "lima", timeout=120)
    condition = _condition(site, "Locked")
    assert condition is not None and (condition["status"], condition["reason"]) == ("False", "Unlocked")
    after = _counts(site)
    assert all(applies >= 2 for _, applies in after.values())  # the patch was applied once unlocked


def test_a_locked_clusters_delete_waits_until_it_is_unlocked(site: Site) -> None:
    site.run("herder", "cluster", "lock", "lima")
    site.wait("cluster", "lima", "Locked", timeout=30)
    before = _counts(site)
    site.run("kubectl", "delete", "cluster", "lima", "--wait=false")

    def waits() -> dict[str, Any] | None:
        found = _condition(site, "Locked")
        return found if found is not None and found["reason"] == "DeleteWaitsForUnlock" else None

    condition = site.until(waits, timeout=30, what="the Locked condition to name the waiting delete")
    assert "herder cluster unlock lima" in condition["message"]
    time.sleep(3)
    shown = site.get("cluster", "lima")
    assert shown["metadata"]["finalizers"] and "unlock" in shown["status"]["teardown"]
    assert len(site.get("machinesets", None, "-l", "herder.dev/cluster=lima")["items"]) == 2
    assert _counts(site) == before  # nothing reset
    site.run("herder", "cluster", "unlock", "lima")
    site.until(
        lambda: site.run("kubectl", "get", "cluster", "lima", check=False).returncode != 0,
        timeout=180,
        what="the cluster to be gone",
    )
    assert all(site.stage_of(m["uuid"]) == "Maintenance" for m in site.machines)
