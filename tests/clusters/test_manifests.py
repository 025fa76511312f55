"""Kubernetes manifests and health checks of a template, end to end on the emulator, as a platform team drives
them with herder's CLI and kubectl: a full-mode manifest (a namespace, a ConfigMap, a CRD and an object of
it, written out of dependency order) and a one-time manifest sync into the workload cluster; removing the
ConfigMap prunes it while the one-time object survives its manifest's removal; a ``kubectl edit`` in the
workload cluster is reverted; ``manifest-sync --dry-run`` shows a pending change; a failing health check
holds a Talos upgrade until it passes; an object in a removed API version holds a Kubernetes minor upgrade;
and every bad input is refused with file, document and field."""

from __future__ import annotations

import json
import os
import shutil
import string
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.api.server import HERDER, KUBECTL
from tests.clusters.site import Site, running_site

pytestmark = pytest.mark.steps

DATA = Path(__file__).parent.parent / "data" / "manifests"
FAILING, PASSING = '["sh", "-c", "exit 3"]', '["true"]'


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == kind), {})


def test_bad_manifests_and_checks_are_refused_with_file_document_and_field() -> None:
    def refused(name: str) -> str:
        result = subprocess.run(
            [HERDER, "cluster", "template", "validate", "-f", str(DATA / "bad" / name)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 1, result.stdout + result.stderr
        return result.stderr

    where = 'Cluster "bad" (document 1): '
    assert (
        f"not-yaml.yaml: {where}kubernetes.manifests[0].file: file 'broken.yaml', document 2: not YAML"
        in refused("not-yaml.yaml")
    )
    assert (
        f"no-kind.yaml: {where}kubernetes.manifests[0].inline: inline text, document 2: kind: is required"
        in refused("no-kind.yaml")
    )
    assert (
        f"fast-check.yaml: {where}kubernetes.healthchecks[0].interval: interval '4s' is shorter than the "
        "minimum of 5s" in refused("fast-check.yaml")
    )
    assert (
        f"outside.yaml: {where}kubernetes.manifests[0].file: '../cluster.yaml' is outside the template's folder"
        in refused("outside.yaml")
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with running_site(tmp_path_factory.mktemp("manifests"), 2, "--manifest-resync", "15") as s:
        yield s


def _template(
    site: Site, talos: str = "v1.12.5", kubernetes: str = "v1.31.0", check: str = FAILING, **edit: Any
) -> Path:
    """The test's template for this site's machines; ``edit`` drops parts of it (``settings``: the ConfigMap
    from the full-mode manifest, ``seed``: the one-time manifest)."""
    target = site.workdir / "template"
    shutil.copytree(DATA / "manifests", target / "manifests", dirs_exist_ok=True)
    uuids = [m["uuid"] for m in site.machines]
    text = string.Template((DATA / "cluster.yaml").read_text()).substitute(
        cp=uuids[0], worker=uuids[1], talos=talos, kubernetes=kubernetes, check=check
    )
    if edit.get("drop_seed"):
        documents = list(yaml.safe_load_all(text))
        documents[0]["kubernetes"]["manifests"] = documents[0]["kubernetes"]["manifests"][:1]
        text = yaml.safe_dump_all(documents)
    base = target / "manifests" / "base.yaml"
    if edit.get("drop_settings"):
        kept = [d for d in yaml.safe_load_all(base.read_text()) if d["kind"] != "ConfigMap"]
        base.write_text(yaml.safe_dump_all(kept))
    path = target / "cluster.yaml"
    path.write_text(text)
    return path


def _sync(site: Site, path: Path) -> str:
    return site.run("herder", "cluster", "template", "sync", "-f", str(path), timeout=240).stdout


def _workload(
    site: Site, *args: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    kubeconfig = site.workdir / "mfst.kubeconfig"
    if not kubeconfig.exists():
        site.run("herder", "cluster", "kubeconfig", "mfst", "-o", str(kubeconfig))
    result = subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {result.stdout}{result.stderr}")
    return result


def _workload_json(site: Site, *args: str) -> Any:
    return json.loads(_workload(site, *args, "-o", "json").stdout)


def _manifest(site: Site, name: str) -> dict[str, Any]:
    return dict(site.get("clustermanifest", name))


def test_the_manifests_sync_into_the_workload_cluster(site: Site) -> None:
    synced = _sync(site, _template(site))
    assert "created clustermanifest/mfst-base" in synced
    assert "created clusterhealthcheck/mfst-ready" in synced
    site.wait("cluster", "mfst", timeout=240)
    site.wait("cluster", "mfst", condition="ManifestsApplied", timeout=120)
    base = _manifest(site, "mfst-base")
    assert base["metadata"]["labels"]["herder.dev/cluster"] == "mfst"
    assert {(o["kind"], o["state"]) for o in base["status"]["objects"]} == {
        ("Namespace", "Applied"),
        ("CustomResourceDefinition", "Applied"),
        ("ConfigMap", "Applied"),
        ("Widget", "Applied"),
    }
    inventory = {(e["kind"], e.get("namespace", ""), e["name"]): e for e in base["status"]["inventory"]}
    assert set(inventory) == {
        ("Namespace", "", "team"),
        ("CustomResourceDefinition", "", "widgets.example.com"),
        ("ConfigMap", "team", "settings"),
        ("Widget", "team", "gear"),
    }
    widget = _workload_json(site, "get", "widgets", "gear", "-n", "team", "--show-managed-fields")
    assert widget["spec"] == {"size": 3}
    assert inventory[("Widget", "team", "gear")]["uid"] == widget["metadata"]["uid"]
    managers = {f["manager"]: f["operation"] for f in widget["metadata"]["managedFields"]}
    assert managers == {"herder": "Apply"}
    crd = _workload_json(site, "get", "crd", "widgets.example.com")
    assert _condition(crd, "Established")["status"] == "True"
    assert _workload_json(site, "get", "configmap", "seed", "-n", "team")["data"] == {"planted": "yes"}


def test_removing_the_configmap_prunes_it_and_the_one_time_object_survives(site: Site) -> None:
    _sync(site, _template(site, drop_settings=True, drop_seed=True))
    site.until(
        lambda: _workload(site, "get", "configmap", "settings", "-n", "team", check=False).returncode != 0,
        timeout=60,
        what="the ConfigMap pruned",
    )
    base = _manifest(site, "mfst-base")
    pruned = [o for o in base["status"]["objects"] if o["state"] == "Pruned"]
    assert [(o["kind"], o["name"]) for o in pruned] == [("ConfigMap", "settings")]
    assert "settings" not in {e["name"] for e in base["status"]["inventory"]}
    site.until(
        lambda: site.run("kubectl", "get", "clustermanifest", "mfst-seed", check=False).returncode != 0,
        timeout=30,
        what="the one-time manifest gone",
    )
    assert _workload_json(site, "get", "configmap", "seed", "-n", "team")["data"] == {"planted": "yes"}


def _size(site: Site) -> int:
    return int(_workload_json(site, "get", "widgets", "gear", "-n", "team")["spec"]["size"])


def _edit_size(site: Site, size: int) -> None:
    """``kubectl edit`` of the widget, its editor a sed script."""
    edited = _workload(
        site,
        "edit",
        "widgets",
        "gear",
        "-n",
        "team",
        env={"KUBE_EDITOR": f"sed -i s/size:.*/size:\\ {size}/"},
    )
    assert "edited" in edited.stdout, edited.stdout + edited.stderr


def test_a_kubectl_edit_in_the_workload_cluster_is_reverted(site: Site) -> None:
    _edit_size(site, 7)
    site.until(lambda: _size(site) == 3, timeout=60, what="the edit reverted")
    events = site.get("events", None, "--field-selector", "reason=DriftReverted")["items"]
    assert any("Widget team/gear" in e["message"] for e in events)


def test_manifest_sync_dry_run_shows_the_pending_change(site: Site) -> None:
    # The drift is reverted at the next resync: the dry run has to come between (tried a few times, each
    # with a size of its own, so that an edit after a resync that came first always changes something).
    for size in range(9, 15):
        _edit_size(site, size)
        shown = site.run("herder", "cluster", "kubernetes", "manifest-sync", "mfst", "--dry-run").stdout
        if f"-  size: {size}" in shown:
            break
    else:
        pytest.fail(f"the dry run never showed the drift: {shown}")
    assert "update Widget team/gear (example.com/v1)" in shown
    assert "+  size: 3" in shown
    assert "unchanged Namespace team (v1)" in shown
    synced = site.run("herder", "cluster", "kubernetes", "manifest-sync", "mfst").stdout
    assert "applied Widget team/gear (example.com/v1)" in synced
    assert _size(site) == 3


def _rollout(site: Site, kind: str) -> dict[str, Any]:
    rollouts = site.get("cluster", "mfst")["status"].get("rollouts") or ()
    return next((r for r in rollouts if r["kind"] == kind), {})


def test_a_failing_health_check_holds_a_talos_upgrade_until_it_passes(site: Site) -> None:
    cluster = site.get("cluster", "mfst")
    assert _condition(cluster, "Healthy")["status"] == "False"
    checks = {c["name"]: c for c in cluster["status"]["healthChecks"]}
    assert checks["mfst-ready"]["state"] == "Failed"
    _sync(site, _template(site, talos="v1.13.9", drop_settings=True, drop_seed=True))
    held = site.until(
        lambda: _rollout(site, "Talos").get("state") == "Held" and _rollout(site, "Talos"), timeout=60
    )
    assert "health check mfst-ready failed" in held["message"]
    members = site.get("clustermachines", None, "-l", "herder.dev/cluster=mfst")["items"]
    assert {m["spec"]["talosVersion"] for m in members} == {"v1.12.5"}

    _sync(site, _template(site, talos="v1.13.9", check=PASSING, drop_settings=True, drop_seed=True))
    site.until(
        lambda: _condition(site.get("cluster", "mfst"), "Healthy").get("status") == "True",
        timeout=60,
        what="the check passing",
    )
    site.until(lambda: _rollout(site, "Talos").get("state") == "Done", timeout=240, what="the Talos upgrade")


FLOW_SCHEMAS = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "flowschemas.flowcontrol.apiserver.k8s.io"},
    "spec": {
        "group": "flowcontrol.apiserver.k8s.io",
        "names": {"kind": "FlowSchema", "plural": "flowschemas", "singular": "flowschema"},
        "scope": "Cluster",
        "versions": [{"name": "v1beta3", "served": True, "storage": True}],
    },
}
LEGACY = {
    "apiVersion": "flowcontrol.apiserver.k8s.io/v1beta3",
    "kind": "FlowSchema",
    "metadata": {"name": "legacy"},
    "spec": {"priorityLevelConfiguration": {"name": "global-default"}},
}


def test_an_object_in_a_removed_api_holds_a_kubernetes_minor_upgrade(site: Site) -> None:
    # The emulator serves no flowcontrol API of its own: a definition stands in for the removed version.
    for obj in (FLOW_SCHEMAS, LEGACY):
        path = site.workdir / f"{obj['kind']}.json"
        path.write_text(json.dumps(obj))
        site.until(
            lambda p=path: _workload(site, "apply", "-f", str(p), check=False).returncode == 0, timeout=30
        )
    checked = site.run(
        "herder", "cluster", "kubernetes", "upgrade-pre-checks", "mfst", "--to", "1.32.0", check=False
    )
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert (
        "FlowSchema legacy (flowcontrol.apiserver.k8s.io/v1beta3): use flowcontrol.apiserver.k8s.io/v1"
        in checked.stdout
    )

    _sync(
        site,
        _template(
            site, talos="v1.13.9", kubernetes="v1.32.0", check=PASSING, drop_settings=True, drop_seed=True
        ),
    )
    condition = site.until(
        lambda: (
            (c := _condition(site.get("cluster", "mfst"), "UpgradePreChecks")).get("reason") == "RemovedAPIs"
            and c
        ),
        timeout=60,
        what="the pre-checks",
    )
    assert condition["status"] == "False"
    assert "FlowSchema legacy (flowcontrol.apiserver.k8s.io/v1beta3)" in condition["message"]
    held = site.until(
        lambda: _rollout(site, "Kubernetes").get("state") == "Held" and _rollout(site, "Kubernetes"),
        timeout=60,
    )
    assert "legacy" in held["message"]
    members = site.get("clustermachines", None, "-l", "herder.dev/cluster=mfst")["items"]
    assert {m["spec"]["kubernetesVersion"] for m in members} == {"1.31.0"}

    site.run("kubectl", "annotate", "cluster", "mfst", "herder.dev/skip-pre-checks=true")
    site.until(
        lambda: _condition(site.get("cluster", "mfst"), "UpgradePreChecks").get("reason") == "Skipped",
        timeout=60,
        what="the skip",
    )
    site.until(
        lambda: _rollout(site, "Kubernetes").get("state") in ("Rolling", "Done"),
        timeout=60,
        what="the upgrade moving",
    )
