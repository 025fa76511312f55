"""``herder cluster import`` on the emulator: a cluster formed outside herder (``herder talos gen config``,
``apply-config``, ``bootstrap``) is taken over with no machine re-applied or rebooted, then unlocked (still
nothing applied), then a config patch of herder's rolls out to it; an abort then removes herder's objects and
leaves the machines as they run, free to be imported again. Bad input is one line naming the option."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.api.server import HERDER
from tests.clusters.site import Site, cluster, running_site

pytestmark = pytest.mark.steps

TALOS = "v1.13.9"


def _herder(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([HERDER, *args], capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"herder {' '.join(args)}: {result.stdout}{result.stderr}")
    return result


def _machines(site: Site) -> dict[str, dict[str, Any]]:
    """Each emulated machine as ``herder emu machines -o json`` shows it (boots, bootID, configApplies)."""
    shown = _herder("emu", "machines", "-o", "json", "--data-dir", str(site.emulator.data_dir))
    return {m["uuid"]: m for m in json.loads(shown.stdout)}


def _counts(site: Site) -> dict[str, tuple[int, int]]:
    return {uuid: (m["boots"], m["configApplies"]) for uuid, m in _machines(site).items()}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with running_site(tmp_path_factory.mktemp("import"), 2, register=False) as s:
        cp, worker = s.machines
        cp_host = cp["endpoint"].rpartition(":")[0]
        out = s.workdir / "configs"
        _herder(
            "talos",
            "gen",
            "config",
            "india",
            f"https://{cp_host}:6443",
            "--talos-version",
            TALOS,
            "--kubernetes-version",
            "1.33.0",
            "-o",
            str(out),
        )
        talosconfig = yaml.safe_load((out / "talosconfig").read_text())
        context = talosconfig["contexts"][talosconfig["context"]]
        context["endpoints"] = [cp_host]
        context["nodes"] = [m["endpoint"].rpartition(":")[0] for m in (cp, worker)]
        (out / "talosconfig").write_text(yaml.safe_dump(talosconfig))
        for machine, file in ((cp, "controlplane.yaml"), (worker, "worker.yaml")):
            _herder("talos", "apply-config", "--insecure", "-e", machine["endpoint"], "-f", str(out / file))
        auth = ("--talosconfig", str(out / "talosconfig"), "-e", cp_host, "-n", cp_host)
        s.until(
            lambda: _herder("talos", "bootstrap", *auth, check=False).returncode == 0,
            timeout=30,
            what="bootstrap",
        )
        s.until(
            lambda: all(str(m["stage"]).lower() == "running" for m in _machines(s).values()),
            timeout=30,
            what="both machines running",
        )
        yield s


def _talosconfig(site: Site) -> Path:
    return site.workdir / "configs" / "talosconfig"


def test_bad_input_is_one_line_naming_the_option(site: Site) -> None:
    missing = site.run(
        "herder", "cluster", "import", "--talosconfig", str(site.workdir / "nope"), check=False
    )
    assert missing.returncode == 1 and missing.stderr.strip().startswith("error: --talosconfig")
    assert len(missing.stderr.strip().splitlines()) == 1
    context = site.run(
        "herder",
        "cluster",
        "import",
        "--talosconfig",
        str(_talosconfig(site)),
        "--context",
        "zz",
        check=False,
    )
    assert context.returncode == 1 and "error: --context zz: not in" in context.stderr
    both = site.run(
        "herder",
        "cluster",
        "import",
        "--abort",
        "india",
        "--talosconfig",
        str(_talosconfig(site)),
        check=False,
    )
    assert both.returncode == 1 and both.stderr.startswith("error: --abort: takes the cluster's name only")
    unknown = site.run("herder", "cluster", "import", "--abort", "nope", check=False)
    assert unknown.returncode == 1 and "error: --abort nope: no cluster of that name" in unknown.stderr


def test_a_dry_run_prints_what_it_would_make_and_makes_nothing(site: Site) -> None:
    before = _counts(site)
    shown = site.run("herder", "cluster", "import", "--talosconfig", str(_talosconfig(site)), "--dry-run")
    assert "would create Cluster india" in shown.stdout
    assert "would create MachineSet india-control-planes" in shown.stdout
    assert "KubeInlineManifestConfig" in shown.stdout or "patched" in shown.stdout
    assert site.run("kubectl", "get", "cluster", "india", check=False).returncode != 0
    assert _counts(site) == before


def test_the_import_takes_the_cluster_over_without_touching_a_machine(site: Site) -> None:
    before = _machines(site)
    done = site.run("herder", "cluster", "import", "--talosconfig", str(_talosconfig(site)))
    assert "cluster india imported" in done.stdout
    site.wait("cluster", "india", "Imported", timeout=60)
    shown = site.get("cluster", "india")
    assert shown["metadata"]["annotations"]["herder.dev/locked"] == "true"
    members = site.get("clustermachines", None, "-l", "herder.dev/cluster=india")["items"]
    assert len(members) == 2 and all(m["status"].get("configHash") for m in members)
    after = _machines(site)
    for uuid, machine in before.items():
        assert (after[uuid]["boots"], after[uuid]["configApplies"]) == (
            machine["boots"],
            machine["configApplies"],
        )
        assert after[uuid]["bootID"] == machine["bootID"] != ""
    again = site.run("herder", "cluster", "import", "--talosconfig", str(_talosconfig(site)), check=False)
    assert again.returncode == 1 and "--name india: a cluster of that name exists already" in again.stderr


def test_unlocking_applies_nothing_and_a_patch_then_rolls_out(site: Site) -> None:
    before = _counts(site)
    site.run("herder", "cluster", "unlock", "india")
    site.wait("cluster", "india", timeout=90)
    assert _counts(site) == before
    site.apply(
        [
            {
                "apiVersion": "herder.dev/v1alpha1",
                "kind": "ConfigPatch",
                "metadata": {
                    "name": "india-ntp",
                    "namespace": "default",
                    "labels": {"herder.dev/cluster": "india"},
                },
                "spec": {"data": "machine:\n  sysctls:\n    kernel.domainname: india.example\n"},
            }
        ]
    )
    site.until(
        lambda: all(after[1] == before[uuid][1] + 1 for uuid, after in _counts(site).items()),
        timeout=60,
        what="the patch applied once to each machine",
    )


def test_an_abort_removes_herders_objects_and_leaves_the_machines_as_they_run(site: Site) -> None:
    site.apply([cluster("juliet")])
    made = site.run("herder", "cluster", "import", "--abort", "juliet", check=False)
    assert made.returncode == 1 and "cluster juliet was not imported" in made.stderr
    site.run("kubectl", "delete", "cluster", "juliet")
    before = _machines(site)
    done = site.run("herder", "cluster", "import", "--abort", "india")
    assert "import of cluster india aborted" in done.stdout and "the 2 Machines" in done.stdout
    for kind in ("clusters", "machinesets", "clustermachines", "configpatches", "machines"):
        assert site.get(kind)["items"] == [], kind
    after = _machines(site)
    for uuid, machine in before.items():
        shown = (after[uuid]["boots"], after[uuid]["configApplies"], after[uuid]["bootID"])
        assert shown == (machine["boots"], machine["configApplies"], machine["bootID"])
        assert str(after[uuid]["stage"]).lower() == "running"
    # Left as they were, the machines can be imported again.
    site.run("herder", "cluster", "import", "--talosconfig", str(_talosconfig(site)))
    site.wait("cluster", "india", "Imported", timeout=60)
    assert _counts(site) == {uuid: (m["boots"], m["configApplies"]) for uuid, m in before.items()}
