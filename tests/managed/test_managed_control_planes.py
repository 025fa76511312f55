"""Managed control planes end to end on the emulator, driven with kubectl and herder's CLI: a hidden
emulator provider (``herder-emu``) offers xs (1 machine) and s (3) as ``emu``, without control plane node
registration; an Omni-format template with a managed xs control plane and auto-provisioned workers syncs
to Ready; an Operator sees the control plane machine read-only and is refused every forbidden action;
the talosconfig reaches workers and not the control plane; Support sees everything; Talos versions off
the list and downgrades are refused; xs grows to s (3 healthy etcd members), never back; a control plane
machine made to vanish, and one that stays unreachable, is replaced and etcd is healthy again; deleting
the cluster leaves nothing behind.

The tests of this module run in order on one site, each starting from where the previous one left off.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.server import HERDER, KUBECTL, support_token_file
from tests.clusters.site import Site, running_site
from tests.provisioning.provider_site import emu, machine_class, start_provider

CLUSTER = "hosted"
CONTROL_PLANES = "hosted-control-planes"
REQUEST_SET = "herder-hosted-control-planes"
PROVIDER_DATA = {"cpus": 2, "memoryMiB": 2048, "diskGiB": 10}
OFFER = {
    "sizes": {
        "xs": {"machines": 1, "providerData": PROVIDER_DATA},
        "s": {"machines": 3, "providerData": PROVIDER_DATA},
    },
    "talosVersions": ["v1.13.8", "v1.13.9"],
    "registerNodes": False,
}
TEMPLATE = f"""\
kind: Cluster
name: {CLUSTER}
talos:
  version: v1.13.9
kubernetes:
  version: 1.33.0
---
kind: ControlPlane
managed:
  enabled: true
  provider: emu
  size: xs
---
kind: Workers
machineClass:
  name: auto-workers
  size: 2
"""


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Site, Path]]:
    """The site, and Support's kubeconfig: the hidden provider is Support's to create; workers come from
    the visible provider ``emu``."""
    workdir = tmp_path_factory.mktemp("managed")
    token_file, token = support_token_file(workdir)
    serve = (
        "--managed-control-planes",
        "--managed-replace-after",
        "3",
        "--managed-backups",
        "5s:2",
        "--support-token-file",
        str(token_file),
    )
    with running_site(workdir, 0, *serve, register=False) as s:
        support = s.server.kubeconfig_for(token, "support")
        providers = [start_provider(s, "herder-emu", "--hidden", by=support)]
        try:
            providers.append(start_provider(s, "emu"))
            yield s, support
        finally:
            for provider in providers:
                provider.stop()


@pytest.fixture(scope="module")
def site(sites: tuple[Site, Path]) -> Site:
    return sites[0]


@pytest.fixture(scope="module")
def support(sites: tuple[Site, Path]) -> Path:
    return sites[1]


@pytest.fixture(scope="module")
def operator(site: Site) -> Path:
    path = site.workdir / "operator.kubeconfig"
    site.run(
        "herder",
        "serviceaccount",
        "create",
        "mcp-operator",
        "--role",
        "Operator",
        "--write-kubeconfig",
        str(path),
    )
    return path


def _as(site: Site, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return site.server.run(*args, kubeconfig=kubeconfig)


def _refused(site: Site, kubeconfig: Path, *args: str) -> str:
    result = _as(site, kubeconfig, *args)
    assert result.returncode != 0, f"{args} should be refused: {result.stdout}"
    return result.stderr


def _json(site: Site, kubeconfig: Path, *args: str) -> Any:
    result = _as(site, kubeconfig, "kubectl", *args, "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _control_plane_machines(site: Site) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = site.get(
        "machines", None, "-l", f"herder.dev/machine-set={CONTROL_PLANES}"
    )["items"]
    return items


def _etcd_healthy(site: Site, members: int) -> bool:
    status = site.get("controlplanestatus", CLUSTER).get("status") or {}
    listed = (status.get("etcd") or {}).get("members") or []
    return len(listed) == members and all(m.get("healthy") for m in listed)


def test_only_support_writes_the_offer_and_users_see_its_projection(site: Site, support: Path) -> None:
    patch = json.dumps({"spec": {"managedControlPlanes": OFFER}})
    hidden = site.run(
        "kubectl", "patch", "infraprovider", "herder-emu", "--type", "merge", "-p", patch, check=False
    )
    assert hidden.returncode != 0 and "NotFound" in hidden.stderr, hidden.stderr
    visible = site.run(
        "kubectl", "patch", "infraprovider", "emu", "--type", "merge", "-p", patch, check=False
    )
    assert visible.returncode != 0 and "only Support may set" in visible.stderr, visible.stderr
    _as(site, support, "kubectl", "patch", "infraprovider", "herder-emu", "--type", "merge", "-p", patch)
    offering = site.until(
        lambda: (
            site.run("kubectl", "get", "managedcontrolplaneoffering", "emu", "-o", "json", check=False).stdout
        ),
        what="the offering emu",
    )
    spec = json.loads(offering)["spec"]
    assert spec == {
        "sizes": [{"name": "xs", "machines": 1}, {"name": "s", "machines": 3}],
        "talosVersions": ["v1.13.8", "v1.13.9"],
    }
    assert "herder-emu" not in offering and "providerData" not in offering
    assert "NotFound" in site.run("kubectl", "get", "infraprovider", "herder-emu", check=False).stderr


def test_a_template_with_a_managed_control_plane_syncs_to_ready(site: Site, operator: Path) -> None:
    site.apply([machine_class("auto-workers", "emu", **PROVIDER_DATA)])
    template = site.workdir / "hosted.yaml"
    template.write_text(TEMPLATE)
    synced = _as(site, operator, "herder", "cluster", "template", "sync", "-f", str(template))
    assert synced.returncode == 0, synced.stderr
    site.wait("cluster", CLUSTER, timeout=120)
    (machine,) = _control_plane_machines(site)
    assert machine["metadata"]["annotations"]["herder.dev/read-only"] == "true"
    assert site.get("clustermachine", machine["metadata"]["name"])["metadata"]["annotations"][
        "herder.dev/read-only"
    ]
    # The template's objects are in sync; the platform's control plane set is none of its business.
    again = _as(site, operator, "herder", "cluster", "template", "sync", "-f", str(template))
    assert again.returncode == 0 and CONTROL_PLANES not in again.stdout, again.stdout + again.stderr
    exported = _as(site, operator, "herder", "cluster", "template", "export", CLUSTER)
    assert exported.returncode == 0, exported.stderr
    assert "managed:\n  enabled: true\n  provider: emu\n  size: xs" in exported.stdout, exported.stdout
    cluster = site.get("cluster", CLUSTER)
    managed = next(c for c in cluster["status"]["conditions"] if c["type"] == "ManagedControlPlane")
    assert managed["status"] == "True" and "herder-emu" not in json.dumps(cluster)


def test_a_managed_cluster_backs_up_on_the_platform_schedule(site: Site, operator: Path) -> None:
    """The template asks for no backups: the platform's schedule (--managed-backups 5s:2) applies, and
    what the user writes in spec.backups does not change it."""
    patched = _as(
        site,
        operator,
        "kubectl",
        "patch",
        "cluster",
        CLUSTER,
        "--type",
        "merge",
        "-p",
        '{"spec": {"backups": {"interval": "24h", "retention": 1}}}',
    )
    assert patched.returncode == 0, patched.stderr

    def backups() -> list[dict[str, Any]]:
        listed = _as(
            site,
            operator,
            "kubectl",
            "get",
            "etcdbackups",
            "-l",
            f"herder.dev/cluster={CLUSTER}",
            "-o",
            "json",
        )
        assert listed.returncode == 0, listed.stderr
        items: list[dict[str, Any]] = json.loads(listed.stdout)["items"]
        return items

    site.until(lambda: len(backups()) == 2, timeout=60, what="two backups on the platform's schedule")
    first = {b["metadata"]["name"] for b in backups()}
    site.until(lambda: {b["metadata"]["name"] for b in backups()} - first, timeout=30, what="a newer backup")
    # The platform's retention (2), not the user's 1.
    site.until(lambda: len(backups()) == 2, timeout=15, what="retention to keep the newest two")


def test_without_node_registration_kubectl_shows_only_the_workers(site: Site) -> None:
    kubeconfig = site.workdir / "hosted.kubeconfig"
    site.run("herder", "cluster", "kubeconfig", CLUSTER, "-o", str(kubeconfig))

    def nodes() -> list[dict[str, Any]] | None:
        got = subprocess.run(
            [KUBECTL, "--kubeconfig", str(kubeconfig), "get", "nodes", "-o", "json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        items: list[dict[str, Any]] = json.loads(got.stdout)["items"] if got.returncode == 0 else []
        return items if len(items) == 2 else None

    listed = site.until(nodes, what="the 2 workers as nodes")
    assert not [n for n in listed if "node-role.kubernetes.io/control-plane" in n["metadata"]["labels"]]
    pods = subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), "get", "pods", "-n", "kube-system", "-o", "name"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert pods.returncode == 0, pods.stderr


def test_an_operator_sees_the_control_plane_read_only_and_nothing_hidden(site: Site, operator: Path) -> None:
    (machine,) = _control_plane_machines(site)
    uuid = machine["metadata"]["name"]
    platform = "managed by the platform"
    forbidden = [
        ("kubectl", "label", "machine", uuid, "team=a"),
        ("kubectl", "annotate", "machine", uuid, "note=x"),
        ("kubectl", "patch", "machine", uuid, "--type", "merge", "-p", '{"spec":{"power":{"on":false}}}'),
        ("kubectl", "patch", "machinesetnode", uuid, "--type", "merge", "-p", '{"spec":{"locked":true}}'),
        ("kubectl", "delete", "machinesetnode", uuid, "--wait=false"),
        (
            "kubectl",
            "patch",
            "machineset",
            CONTROL_PLANES,
            "--type",
            "merge",
            "-p",
            '{"spec":{"role":"worker"}}',
        ),
        ("kubectl", "delete", "machineset", CONTROL_PLANES, "--wait=false"),
    ]
    for command in forbidden:
        assert platform in _refused(site, operator, *command), command
    # Deleting a machine is an Admin's, and refused to Admins too.
    deleted = site.run("kubectl", "delete", "machine", uuid, "--wait=false", check=False)
    assert deleted.returncode != 0 and platform in deleted.stderr, deleted.stderr
    patches = site.workdir / "patches.yaml"
    patches.write_text(
        "\n---\n".join(
            f"apiVersion: herder.dev/v1alpha1\nkind: ConfigPatch\nmetadata:\n  name: mine-{i}\n  namespace: default\n"
            f"  labels: {{herder.dev/cluster: {CLUSTER}, {label}: {value}}}\nspec: {{data: 'machine: {{}}'}}\n"
            for i, (label, value) in enumerate(
                (
                    ("herder.dev/machine", uuid),
                    ("herder.dev/cluster-machine", uuid),
                    ("herder.dev/machine-set", CONTROL_PLANES),
                )
            )
        )
    )
    refused = _refused(site, operator, "kubectl", "apply", "-f", str(patches))
    assert refused.count(platform) == 3, refused
    off = json.dumps({"spec": {"controlPlane": {"managed": {"enabled": False}}}})
    assert "cannot be switched off" in _refused(
        site, operator, "kubectl", "patch", "cluster", CLUSTER, "--type", "merge", "-p", off
    )
    # The hidden objects do not exist: not by name, not in lists, not in what the cluster says.
    for kind, name in (
        ("machinerequestset", REQUEST_SET),
        ("configpatch", "herder-hosted-kubespan"),
        ("infraprovider", "herder-emu"),
    ):
        assert "NotFound" in _refused(site, operator, "kubectl", "get", kind, name)
    for kind in (
        "machinerequestsets",
        "machinerequests",
        "configpatches",
        "infraproviders",
        "events",
        "machinesets",
        "machinesetnodes",
    ):
        listed = _as(site, operator, "kubectl", "get", kind, "-A", "-o", "json")
        assert listed.returncode == 0 and "herder-" not in listed.stdout, (kind, listed.stdout[:2000])
    cluster = _as(site, operator, "kubectl", "describe", "cluster", CLUSTER).stdout
    assert "herder-emu" not in cluster and REQUEST_SET not in cluster


def test_the_control_plane_set_names_no_hidden_request_set_below_support(
    site: Site, operator: Path, support: Path
) -> None:
    # The set allocates from the hidden request set: Support sees which, nobody below does.
    assert (
        _json(site, support, "get", "machineset", CONTROL_PLANES)["spec"]["machineRequestSet"] == REQUEST_SET
    )
    shown = _json(site, operator, "get", "machineset", CONTROL_PLANES)
    assert shown["spec"]["role"] == "controlplane" and "machineRequestSet" not in shown["spec"], shown["spec"]
    path = "/apis/herder.dev/v1alpha1/namespaces/default/machinesets"
    for args in (
        ("kubectl", "get", "machineset", CONTROL_PLANES, "-o", "yaml"),
        ("kubectl", "get", "machinesets", "-o", "wide"),
        ("kubectl", "describe", "machineset", CONTROL_PLANES),
        ("kubectl", "get", "--raw", f"{path}?watch=1&timeoutSeconds=1"),
        ("herder", "get", "machinesets"),
    ):
        read = _as(site, operator, *args)
        assert read.returncode == 0 and CONTROL_PLANES in read.stdout, (args, read.stderr)
        # (herder's own client, a field manager of the set, is named herder-client: no hidden object.)
        assert REQUEST_SET not in read.stdout and "herder-emu" not in read.stdout, (args, read.stdout)


def test_the_talosconfig_reaches_workers_and_not_the_control_plane(site: Site, operator: Path) -> None:
    talosconfig = site.workdir / "operator.talosconfig"
    made = _as(site, operator, "herder", "cluster", "talosconfig", CLUSTER, "-o", str(talosconfig))
    assert made.returncode == 0, made.stderr
    (control_plane,) = _control_plane_machines(site)
    worker = site.get("machines", None, "-l", "herder.dev/machine-set=hosted-workers")["items"][0]

    def talos(machine: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        node = machine["spec"]["endpoint"].rpartition(":")[0]
        return subprocess.run(
            [HERDER, "talos", "--talosconfig", str(talosconfig), "-n", node, "version"],
            capture_output=True,
            text=True,
            timeout=60,
        )

    reached = talos(worker)
    assert reached.returncode == 0, reached.stderr
    refused = talos(control_plane)
    assert refused.returncode != 0 and "managed by the platform" in refused.stderr, refused.stderr


def test_support_sees_everything_and_impersonation_is_audited(site: Site, support: Path) -> None:
    for kind, name in (("machinerequestset", REQUEST_SET), ("infraprovider", "herder-emu")):
        assert _json(site, support, "get", kind, name)["metadata"]["name"] == name
    hidden = _json(site, support, "get", "configpatches", "-l", f"herder.dev/cluster={CLUSTER}")["items"]
    names = {p["metadata"]["name"] for p in hidden}
    assert names >= {"herder-hosted-kubespan", "herder-hosted-control-planes"}
    seen = _as(site, support, "kubectl", "--as=mcp-operator", "get", "machinerequestsets", "-o", "name")
    assert seen.returncode == 0 and REQUEST_SET not in seen.stdout, seen.stdout
    events = site.get("auditevents", None, "-l", "herder.dev/audit-kind=MachineRequestSet")["items"]
    assert any(
        e["spec"]["user"] == "serviceaccount:mcp-operator" and e["spec"]["impersonator"] == "support:platform"
        for e in events
    )


def test_talos_versions_off_the_list_and_downgrades_are_refused(site: Site, operator: Path) -> None:
    def version(talos: str) -> str:
        body = json.dumps({"spec": {"talosVersion": talos}})
        return _refused(site, operator, "kubectl", "patch", "cluster", CLUSTER, "--type", "merge", "-p", body)

    assert "not offered for managed control planes" in version("v1.13.7")
    assert "never downgraded" in version("v1.13.8")


def test_the_control_plane_grows_from_xs_to_s_and_never_shrinks(site: Site, operator: Path) -> None:
    def size(name: str) -> subprocess.CompletedProcess[str]:
        body = json.dumps(
            {"spec": {"controlPlane": {"managed": {"enabled": True, "provider": "emu", "size": name}}}}
        )
        return _as(site, operator, "kubectl", "patch", "cluster", CLUSTER, "--type", "merge", "-p", body)

    assert size("s").returncode == 0
    site.until(lambda: len(_control_plane_machines(site)) == 3, timeout=90, what="3 control planes")
    site.until(lambda: _etcd_healthy(site, 3), timeout=90, what="3 healthy etcd members")
    site.wait("cluster", CLUSTER, timeout=90)
    shrink = size("xs")
    assert shrink.returncode != 0 and "grows and never shrinks" in shrink.stderr, shrink.stderr


@pytest.mark.parametrize(
    ("fault", "told"),
    [("vanish", "EtcdMemberRemoved"), ("partition", "ReplacingControlPlane")],
    ids=["vanished", "unreachable"],
)
def test_a_failed_control_plane_is_replaced_and_etcd_is_healthy_again(
    site: Site, operator: Path, fault: str, told: str
) -> None:
    before = {m["metadata"]["name"] for m in _control_plane_machines(site)}
    gone = sorted(before)[0]
    emu(site, "fault", gone, fault)
    site.until(
        lambda: (
            (now := {m["metadata"]["name"] for m in _control_plane_machines(site)})
            and gone not in now
            and len(now) == 3
        ),
        timeout=90,
        what="a replacement control plane",
    )
    site.until(lambda: _etcd_healthy(site, 3), timeout=90, what="3 healthy etcd members again")
    site.wait("cluster", CLUSTER, timeout=90)
    events = site.run("kubectl", "get", "events", "--field-selector", f"involvedObject.name={CLUSTER}").stdout
    assert told in events and gone in events, events
    # Nothing the cluster told on the way names a hidden object.
    seen = _as(site, operator, "kubectl", "get", "events", "-o", "json").stdout
    shown = _as(site, operator, "kubectl", "get", "cluster,machinesets", "-o", "json").stdout
    assert "herder-emu" not in seen + shown and f"{REQUEST_SET}-" not in seen + shown


def test_deleting_the_cluster_leaves_nothing_behind(site: Site, support: Path) -> None:
    """Its control planes are reset and destroyed like its workers, and Support sees nothing left."""
    site.run("kubectl", "delete", "cluster", CLUSTER, "--wait=false")

    def left() -> list[str]:
        shown = _as(
            site,
            support,
            "kubectl",
            "get",
            "machines,machinerequests,machinerequestsets,machinesets",
            "-o",
            "name",
        )
        return shown.stdout.split()

    site.until(lambda: left() == [], timeout=90, what="no machine, request or set left")
    assert "NotFound" in site.run("kubectl", "get", "cluster", CLUSTER, check=False).stderr
