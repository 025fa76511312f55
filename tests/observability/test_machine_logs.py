"""Machine logs kept by herder, end to end on the emulator with herder's CLI: clusters formed from machines
an infra provider makes; ``herder machine logs`` and ``dmesg`` print what herder followed through the
Talos API (``-f`` streams new lines; ``--tail`` and ``--since`` cut); a secret a service prints is kept
redacted; a reader of one cluster reads its machines' logs and not another's; a machine's logs stay
readable after it was reset and destroyed, and after it vanished in the cloud.

The tests of this module run in order on one site, each starting from where the previous one left off.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.api.conftest import make_account
from tests.api.server import HERDER
from tests.clusters.site import Site, cluster, machine_set
from tests.provisioning.provider_site import emu, machine_class, provisioning_site, requests_of

POLICY = {
    "apiVersion": "herder.dev/v1alpha1",
    "kind": "AccessPolicy",
    "metadata": {"name": "access-policy"},
    "spec": {"rules": [{"users": ["serviceaccount:beta-reader"], "clusters": ["beta"], "role": "Reader"}]},
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with provisioning_site(tmp_path_factory.mktemp("logs")) as (s, _):
        s.apply(
            [
                machine_class("emulated", "emu", cpus=2, memoryMiB=2048, diskGiB=10),
                cluster("alpha"),
                machine_set(
                    "alpha",
                    "alpha-control-planes",
                    "controlplane",
                    machineClass={"name": "emulated", "size": 1},
                ),
                machine_set("alpha", "alpha-workers", "worker", machineClass={"name": "emulated", "size": 2}),
                cluster("beta"),
                machine_set(
                    "beta",
                    "beta-control-planes",
                    "controlplane",
                    machineClass={"name": "emulated", "size": 1},
                ),
                POLICY,
            ]
        )
        s.wait("cluster", "alpha", timeout=180)
        s.wait("cluster", "beta", timeout=180)
        yield s


@pytest.fixture(scope="module")
def kubeconfigs(site: Site) -> dict[str, Path]:
    """An Admin's, Support's, and one of role None made Reader of beta by the access policy."""
    support = asyncio.run(make_account(site.server, "support", "Support"))
    beta = asyncio.run(make_account(site.server, "beta-reader", "None"))
    return {
        "Admin": site.server.kubeconfig,
        "Support": site.server.kubeconfig_for(support, "support"),
        "beta-reader": site.server.kubeconfig_for(beta, "beta-reader"),
    }


def machines_of(site: Site, machine_set_name: str) -> list[str]:
    items = site.get("machines", None, "-l", f"herder.dev/machine-set={machine_set_name}")["items"]
    return sorted(m["metadata"]["name"] for m in items)


def herder(
    site: Site, *args: str, kubeconfig: Path | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    result = site.server.run("herder", *args, kubeconfig=kubeconfig)
    if check:
        assert result.returncode == 0, f"herder {' '.join(args)}: {result.stdout}{result.stderr}"
    return result


def logs_of(site: Site, uuid: str, *args: str, kubeconfig: Path | None = None) -> str:
    return herder(site, "machine", "logs", uuid, *args, kubeconfig=kubeconfig).stdout


def test_a_machines_service_logs_and_kernel_log_are_kept(site: Site) -> None:
    (cp,) = machines_of(site, "alpha-control-planes")
    kubelet = site.until(
        lambda: (out := logs_of(site, cp, "kubelet")) and "Successfully registered node" in out and out,
        timeout=30,
        what="the kubelet's lines",
    )
    assert all(line.startswith("I") for line in kubelet.splitlines())  # klog, as the kubelet writes
    every = logs_of(site, cp)
    services = {line.split(": ", 1)[0] for line in every.splitlines()}
    assert {"etcd", "kubelet", "machined", "apid"} <= services
    dmesg = herder(site, "machine", "dmesg", cp).stdout
    assert "Linux version" in dmesg and "[talos]" in dmesg
    assert len(logs_of(site, cp, "kubelet", "--tail", "1").splitlines()) == 1
    stamped = logs_of(site, cp, "kubelet", "--tail", "1", "--timestamps").split()[0]
    assert stamped.endswith("Z") and "T" in stamped
    assert logs_of(site, cp, "kubelet", "--since", "1h") == kubelet
    bad = herder(site, "machine", "logs", cp, "--since", "soon", check=False)
    assert bad.returncode == 1 and "--since" in bad.stderr
