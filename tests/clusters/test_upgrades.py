"""Day-2 operations on the emulator, as a user asks for them with kubectl: a Talos upgrade rolls through the
control planes strictly one at a time with etcd keeping quorum, then the workers; a Kubernetes upgrade of
one minor shows in ``kubectl get nodes``; a machine that fails its upgrade stops the rollout, visibly."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.server import KUBECTL
from tests.clusters.site import Site, cluster, machine_set, running_site

# Each test moves the cluster on from where the one before left it.
pytestmark = pytest.mark.steps

FROM, TO, NEXT = "v1.13.9", "v1.14.1", "v1.14.2"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with running_site(tmp_path_factory.mktemp("upgrades"), 5) as s:
        machines = [m["uuid"] for m in s.machines]
        s.apply(
            [
                cluster("echo", talos=FROM),
                machine_set("echo", "echo-control-planes", "controlplane", machines=machines[:3]),
                machine_set(
                    "echo",
                    "echo-workers",
                    "worker",
                    machines=machines[3:],
                    upgradeStrategy={"type": "Rolling", "rolling": {"maxParallelism": 2}},
                ),
            ]
        )
        s.wait("cluster", "echo", timeout=120)
        yield s


def _members(site: Site) -> list[dict[str, Any]]:
    return list(site.get("clustermachines", None, "-l", "herder.dev/cluster=echo")["items"])


def _patch_cluster(site: Site, spec: str) -> None:
    site.run("kubectl", "patch", "cluster", "echo", "--type", "merge", "-p", f'{{"spec": {spec}}}')


def _quorum(site: Site) -> bool:
    clusters = asyncio.run(site.emulator.control("GET", "/clusters"))
    ours = [c for c in clusters if c.get("name") == "echo"]
    return bool(ours) and bool(ours[0].get("quorum"))


def test_talos_upgrade_rolls_control_planes_one_at_a_time_then_workers(site: Site) -> None:
    _patch_cluster(site, f'{{"talosVersion": "{TO}"}}')
    upgraded_at: dict[str, float] = {}
    most_control_planes_away = 0
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        members = _members(site)
        for m in members:
            if (m.get("status") or {}).get("talosVersion") == TO:
                upgraded_at.setdefault(m["metadata"]["name"], time.monotonic())
        away = [
            m
            for m in members
            if m["spec"]["role"] == "controlplane"
            and (
                m["spec"]["talosVersion"] == TO
                and not ((m.get("status") or {}).get("talosVersion") == TO and m["status"].get("ready"))
            )
        ]
        most_control_planes_away = max(most_control_planes_away, len(away))
        assert _quorum(site), "etcd lost quorum during the upgrade"
        if len(upgraded_at) == 5 and all(m["status"].get("ready") for m in members):
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"the upgrade did not finish: {upgraded_at}")
    roles = {m["metadata"]["name"]: m["spec"]["role"] for m in _members(site)}
    order = sorted(upgraded_at, key=upgraded_at.__getitem__)
    assert [roles[name] for name in order] == ["controlplane"] * 3 + ["worker"] * 2, order
    assert most_control_planes_away == 1
    site.wait("cluster", "echo", timeout=60)
    # The rollout's summary follows the members' readiness after its settle (a second).
    talos = site.until(
        lambda: next(
            (
                r
                for r in site.get("cluster", "echo")["status"]["rollouts"]
                if r["kind"] == "Talos" and r["state"] == "Done"
            ),
            None,
        ),
        timeout=10,
        what="the Talos rollout Done",
    )
    assert talos == {**talos, "target": TO, "done": 5, "total": 5, "state": "Done"}
    moves = site.get("events", None, "--field-selector", "reason=TalosRollout")["items"]
    assert len(moves) == 5


def test_kubernetes_upgrade_of_one_minor_shows_in_get_nodes(site: Site) -> None:
    _patch_cluster(site, '{"kubernetesVersion": "1.34.1"}')
    kubeconfig = site.workdir / "echo.kubeconfig"
    site.run("herder", "cluster", "kubeconfig", "echo", "-o", str(kubeconfig))

    def versions() -> set[str]:
        out = subprocess.run(
            [KUBECTL, "--kubeconfig", str(kubeconfig), "get", "nodes", "--no-headers"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
        return {line.split()[4] for line in out.splitlines() if line.strip()}

    site.until(lambda: versions() == {"v1.34.1"}, timeout=180, what="every node on v1.34.1")
    site.wait("cluster", "echo", timeout=60)
    refused = site.run(
        "kubectl",
        "patch",
        "cluster",
        "echo",
        "--type",
        "merge",
        "-p",
        '{"spec": {"kubernetesVersion": "1.36.0"}}',
        check=False,
    )
    assert refused.returncode != 0 and "one minor version at a time" in refused.stderr


def _failing_worker(site: Site) -> str:
    """The worker the failing upgrade is injected into: the first one."""
    return next(m["metadata"]["name"] for m in _members(site) if m["spec"]["role"] == "worker")


def test_a_failed_upgrade_stops_the_rollout_visibly(site: Site) -> None:
    worker = _failing_worker(site)
    asyncio.run(site.emulator.control("POST", f"/machines/{worker}/fault", {"fault": "fail-upgrade"}))
    _patch_cluster(site, f'{{"talosVersion": "{NEXT}"}}')

    def stopped() -> dict[str, Any] | None:
        rollouts = (site.get("cluster", "echo").get("status") or {}).get("rollouts") or []
        return next((r for r in rollouts if r["kind"] == "Talos" and r["state"] == "Stopped"), None)

    rollout = site.until(stopped, timeout=240, what="the rollout to stop")
    assert worker in rollout["message"] and "did not boot" in rollout["message"]
    member = site.get("clustermachine", worker)
    assert member["status"]["upgrade"]["target"] == NEXT
    assert "came back on v1.14.1" in member["status"]["upgrade"]["error"]

    def ready() -> dict[str, Any]:
        return next(c for c in site.get("cluster", "echo")["status"]["conditions"] if c["type"] == "Ready")

    # The cluster's summary settles a moment after the rollout it reads.
    told = site.until(lambda: worker in ready()["message"] and ready(), timeout=15, what="Ready to name it")
    assert told["status"] == "False"
    failures = site.get(
        "events", None, "--field-selector", f"involvedObject.name={worker},reason=UpgradeFailed"
    )
    assert len(failures["items"]) == 1


def test_a_machine_whose_upgrade_failed_is_not_tried_again(site: Site) -> None:
    worker = _failing_worker(site)
    time.sleep(3)
    assert site.get("clustermachine", worker)["status"]["talosVersion"] == TO
    failures = site.get(
        "events", None, "--field-selector", f"involvedObject.name={worker},reason=UpgradeFailed"
    )
    assert len(failures["items"]) == 1


def test_setting_the_version_back_cancels_the_rollout(site: Site) -> None:
    worker = _failing_worker(site)
    asyncio.run(site.emulator.control("POST", f"/machines/{worker}/fault", {"fault": "heal"}))
    _patch_cluster(site, f'{{"talosVersion": "{TO}"}}')
    site.until(
        lambda: all((m.get("status") or {}).get("talosVersion") == TO for m in _members(site)),
        timeout=240,
        what=f"every machine on {TO}",
    )
    site.wait("cluster", "echo", timeout=120)
