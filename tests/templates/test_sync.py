"""Cluster templates end to end on the emulator, through herder's CLI as a platform team drives it: an
Omni-format template (three listed control planes, workers from a machine class, a patch file, a Machine
document with an inline patch) syncs to Ready, ``diff`` then prints nothing, the export syncs back with no
change, a set removed from the template is torn down, refused changes say why, and ``delete`` tears the
cluster down."""

from __future__ import annotations

import asyncio
import shutil
import string
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clusters.site import Site, machine_class, running_site
from tests.data.templates import TEMPLATES

E2E = TEMPLATES / "e2e"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with running_site(tmp_path_factory.mktemp("templates"), 6) as s:
        yield s


def _template(site: Site, folder: str, **extra: str) -> Path:
    """The e2e template written for this site's machines (the $-names of the file), patch files beside it."""
    uuids = [m["uuid"] for m in site.machines]
    names = {"cp0": uuids[0], "cp1": uuids[1], "cp2": uuids[2], **extra}
    target = site.workdir / folder
    shutil.copytree(E2E / "patches", target / "patches", dirs_exist_ok=True)
    path = target / "cluster.yaml"
    path.write_text(string.Template((E2E / "cluster.yaml").read_text()).substitute(names))
    return path


def _template_cli(
    site: Site, *args: str, check: bool = True, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return site.run("herder", "cluster", "template", *args, check=check, timeout=timeout)


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == kind), {})


def test_an_omni_template_syncs_to_ready_and_stays_in_sync(site: Site) -> None:
    uuids = [m["uuid"] for m in site.machines]
    for uuid in uuids[3:5]:
        site.run("kubectl", "label", "machine", uuid, "pool=tmpl")
    site.apply([machine_class("tmpl-workers", {"pool": "tmpl"})])
    path = _template(site, "first")

    # A directory's templates sync one after another (its patches/ folder is not read as templates).
    synced = _template_cli(site, "sync", "-f", str(path.parent))
    assert "created cluster/tmpl" in synced.stdout
    assert "created configpatch/200-tmpl-patches-sysctls.yaml" in synced.stdout

    status = _template_cli(site, "status", "-f", str(path), "--wait", "3m")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "cluster tmpl is healthy" in status.stdout
    assert "machineset tmpl-control-planes (controlplane)" in status.stdout
    assert f"{uuids[0]}: Running, ready, Talos v1.13.9" in status.stdout

    cluster = site.get("cluster", "tmpl")
    assert _condition(cluster, "Ready")["status"] == "True"
    assert cluster["metadata"]["annotations"]["herder.dev/managed-by"] == "cluster-templates"
    members = site.get("clustermachines", None, "-l", "herder.dev/cluster=tmpl")["items"]
    assert {m["metadata"]["name"] for m in members} == set(uuids[:5])
    patch = site.get("configpatch", f"400-tmpl-{uuids[0]}-hostname")
    assert patch["metadata"]["labels"] == {
        "herder.dev/cluster": "tmpl",
        "herder.dev/cluster-machine": uuids[0],
    }
    # The Machine document's inline patch reached its machine, and only that one.
    machine = asyncio.run(site.emulator.control("GET", f"/machines/{uuids[0]}"))
    assert machine["hostname"] == "tmpl-cp-first"
    other = asyncio.run(site.emulator.control("GET", f"/machines/{uuids[1]}"))
    assert other["hostname"] != "tmpl-cp-first"

    diff = _template_cli(site, "diff", "-f", str(path))
    assert diff.returncode == 0 and diff.stdout == "", diff.stdout
    again = _template_cli(site, "sync", "-f", str(path))
    assert again.stdout.strip() == "cluster tmpl: no changes"

    # Export of the live cluster syncs back with no change.
    exported = site.workdir / "exported.yaml"
    _template_cli(site, "export", "tmpl", "-o", str(exported))
    assert _template_cli(site, "validate", "-f", str(exported)).returncode == 0
    assert _template_cli(site, "diff", "-f", str(exported)).stdout == ""
    assert _template_cli(site, "sync", "-f", str(exported)).stdout.strip() == "cluster tmpl: no changes"


def test_a_changed_template_updates_and_a_removed_set_is_torn_down(site: Site) -> None:
    uuids = [m["uuid"] for m in site.machines]
    path = _template(site, "second")
    text = path.read_text()
    extra = (
        f"---\nkind: Workers\nname: extra\nmachines:\n  - {uuids[5]}\n"
        f"---\nkind: Machine\nname: {uuids[5]}\nlabels:\n  rack: r1\ninstall:\n  disk: /dev/vdb\n"
    )
    path.write_text(text.replace("maxParallelism: 2", "maxParallelism: 1") + extra)
    diff = _template_cli(site, "diff", "-f", str(path)).stdout
    assert "+++ template/MachineSet/tmpl-extra" in diff
    assert "-      maxParallelism: 2\n+      maxParallelism: 1" in diff
    synced = _template_cli(site, "sync", "-f", str(path))
    assert (
        "updated machineset/tmpl-workers" in synced.stdout
        and "created machineset/tmpl-extra" in synced.stdout
    )
    # The Machine document's lock, disk and labels go on the node once the set's allocation made it.
    assert f"updated machinesetnode/{uuids[5]}" in synced.stdout
    node = site.get("machinesetnode", uuids[5])
    assert node["spec"] == {"locked": False, "installDisk": "/dev/vdb"}
    assert node["metadata"]["labels"]["rack"] == "r1"
    assert node["metadata"]["labels"]["herder.dev/machine-set"] == "tmpl-extra"
    assert _template_cli(site, "status", "-f", str(path), "--wait", "3m").returncode == 0
    assert site.get("machine", uuids[5])["metadata"]["labels"]["herder.dev/cluster"] == "tmpl"
    assert _template_cli(site, "diff", "-f", str(path)).stdout == ""

    path.write_text(text)
    synced = _template_cli(site, "sync", "-f", str(path))
    assert "deleted machineset/tmpl-extra" in synced.stdout
    assert "waiting for machine set(s) to be torn down" in synced.stderr
    assert site.stage_of(uuids[5]) == "Maintenance" or site.until(
        lambda: site.stage_of(uuids[5]) == "Maintenance", timeout=60, what="the extra worker reset"
    )
    assert _template_cli(site, "diff", "-f", str(path)).stdout == ""


def test_refused_templates_and_changes_say_why(site: Site) -> None:
    path = _template(site, "third")
    outside = site.workdir / "outside.yaml"
    outside.write_text("machine:\n  sysctls:\n    a.b: '1'\n")
    text = path.read_text()
    (path.parent / "broken.yaml").write_text(
        text.replace("file: patches/sysctls.yaml", "file: ../outside.yaml")
    )
    path.write_text(text.replace("net.core.somaxconn", "net.core.netdev_max_backlog"))
    # Every template of a directory is checked before any is synced: the good one is not synced either.
    refused = _template_cli(site, "sync", "-f", str(path.parent), check=False)
    assert refused.returncode == 1
    assert (
        "broken.yaml: Cluster \"tmpl\" (document 1): patches[0].file: '../outside.yaml' is outside the template's folder"
        in refused.stderr
    )
    assert "somaxconn" in site.get("configpatch", "200-tmpl-patches-sysctls.yaml")["spec"]["data"]
    (path.parent / "broken.yaml").unlink()

    # The server refuses a Talos downgrade below the minor the cluster was created with: sync says why.
    path.write_text(text.replace("version: v1.13.9", "version: v1.12.6"))
    refused = _template_cli(site, "sync", "-f", str(path), check=False)
    assert refused.returncode == 1
    assert "spec.talosVersion" in refused.stderr and "cannot go below" in refused.stderr
    assert site.get("cluster", "tmpl")["spec"]["talosVersion"] == "v1.13.9"

    # A name the template wants that belongs to another cluster is left alone, and the sync refused.
    foreign = {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "ConfigPatch",
        "metadata": {
            "name": "201-tmpl-mine",
            "namespace": "default",
            "labels": {"herder.dev/cluster": "other"},
        },
        "spec": {"data": "machine: {}\n"},
    }
    site.apply([foreign])
    mine = "- file: patches/sysctls.yaml\n  - name: mine\n    inline:\n      machine: {}"
    path.write_text(text.replace("- file: patches/sysctls.yaml", mine))
    refused = _template_cli(site, "sync", "-f", str(path), check=False)
    assert refused.returncode == 1
    assert "ConfigPatch 201-tmpl-mine belongs to cluster other" in refused.stderr
    assert site.get("configpatch", "201-tmpl-mine")["metadata"]["labels"] == {"herder.dev/cluster": "other"}
    site.run("kubectl", "delete", "configpatch", "201-tmpl-mine")


def test_delete_tears_the_cluster_down(site: Site) -> None:
    path = _template(site, "fourth")
    deleted = _template_cli(site, "delete", "-f", str(path), "--wait", "3m")
    assert "cluster tmpl is gone" in deleted.stdout
    assert site.get("clusters")["items"] == []
    uuids = [m["uuid"] for m in site.machines]
    site.until(
        lambda: all(site.stage_of(u) == "Maintenance" for u in uuids[:5]),
        timeout=60,
        what="all in maintenance",
    )
    gone = _template_cli(site, "delete", "-f", str(path))
    assert "does not exist" in gone.stdout
    status = _template_cli(site, "status", "-f", str(path), "--wait", "2s", check=False)
    assert status.returncode == 1
    assert "cluster tmpl is not healthy after 2s: cluster tmpl: not found" in status.stderr
