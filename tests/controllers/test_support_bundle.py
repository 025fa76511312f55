"""SupportBundles on the in-memory store: a bundle holds the cluster's objects, conditions, Events, audit
entries, machine logs and etcd's answers as the caller's role on the cluster may see them (no hidden
object below Support, no audit trail below Admin, nothing of another cluster), no secret of the cluster,
and says in its README what it could not gather and why."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import yaml

from herder.controllers.cluster_keys import ClusterKeys
from herder.controllers.observability.support_bundle import SupportBundles
from herder.resources import Resource
from herder.resources.access import HIDDEN_LABEL
from herder.resources.audit_labels import AUDIT_NAME_LABEL
from herder.state.machine_logs import KERNEL, LogScope, MachineLogs
from herder.talos.machine.errors import Unavailable
from herder.talos.machine.pool import ClientPool
from herder.talos.machine.types import EtcdMember, EtcdMemberStatus
from herder.talos.redaction import bundle_secrets
from herder.talos.secrets import load_secrets
from tests.controllers.site import NAMESPACE, Site, obj, secrets_bundle

ENDPOINT = "127.0.0.9:50000"


def audit(name: str, kind: str, obj_name: str, message: str) -> Resource:
    return obj(
        "AuditEvent",
        name,
        namespaced=False,
        metadata={"labels": {AUDIT_NAME_LABEL: obj_name}},
        spec={
            "time": "2025-01-01T00:00:00.000000Z",
            "user": "User/alice",
            "role": "Admin",
            "verb": "update",
            "kind": kind,
            "namespace": NAMESPACE,
            "name": obj_name,
            "code": 200,
            "result": "Success",
            "message": message,
        },
    )


async def two_clusters(site: Site) -> Resource:
    """alpha (a control plane m1 and a hidden patch) and beta (a machine m2); alpha is returned."""
    alpha, beta = await site.create(
        *(
            obj("Cluster", name, spec={"talosVersion": "v1.13.0", "kubernetesVersion": "1.33.0"})
            for name in ("alpha", "beta")
        )
    )
    await site.cluster_secrets(alpha)
    ours = {"herder.dev/cluster": "alpha"}
    member, machine, _patch, other = await site.create(
        obj(
            "ClusterMachine",
            "m1",
            spec={"role": "controlplane", "talosVersion": "v1.13.0", "kubernetesVersion": "1.33.0"},
            metadata={"labels": ours},
        ),
        obj("Machine", "m1", spec={"endpoint": ENDPOINT}, metadata={"labels": ours}),
        obj(
            "ConfigPatch",
            "herder-support-only",
            spec={"data": "machine: {}"},
            metadata={"labels": {**ours, HIDDEN_LABEL: "true"}},
        ),
        obj(
            "Machine",
            "m2",
            spec={"endpoint": "127.0.0.10:50000"},
            metadata={"labels": {"herder.dev/cluster": "beta"}},
        ),
    )
    await site.set_status(machine, connected=True, stage="Running", talosVersion="v1.13.0")
    await site.set_status(
        member,
        conditions=[{"type": "Ready", "status": "False", "reason": "Booting", "message": "kubelet not up"}],
    )
    # A Kubernetes API that does not answer: the bundle says so instead of failing.
    await site.set_status(alpha, endpoint="https://127.0.0.1:9")
    await site.events.record(machine, "Normal", "Connected", "machine m1 connected")
    await site.events.record(other, "Normal", "Connected", "machine m2 connected")
    await site.create(
        audit("20250101-000000-000001-aaaaaa", "Cluster", "alpha", "update of alpha"),
        audit("20250101-000000-000002-bbbbbb", "Cluster", "beta", "update of beta"),
    )
    del beta
    fresh = await site.get("Cluster", "alpha")
    assert fresh is not None
    return fresh


def machine_logs(tmp_path: Path) -> MachineLogs:
    logs = MachineLogs(tmp_path / "logs")
    token = load_secrets(secrets_bundle("1.13"), check_keys=False).trustd_token
    ours = LogScope(NAMESPACE, "alpha")
    logs.append("m1", LogScope(NAMESPACE, "beta"), "kubelet", ["from when m1 was beta's"], at=1.0)
    logs.append("m1", ours, "kubelet", ["registered node m1", f"joining with {token}"], at=2.0)
    logs.append("m1", ours, KERNEL, ["Linux version 6.12"], at=3.0)
    logs.append("m2", LogScope(NAMESPACE, "beta"), "kubelet", ["beta's kubelet"], at=2.0)
    return logs


def unzip(data: bytes) -> dict[str, str]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(name).decode() for name in archive.namelist()}


async def test_an_admins_bundle_holds_the_cluster_and_nothing_else(sealed_site: Site, tmp_path: Path) -> None:
    site = sealed_site
    alpha = await two_clusters(site)
    site.machines.answer("etcd_member_list", [EtcdMember(0xABC, "m1", ("https://m1:2380",), (), False)])
    site.machines.answer("etcd_status", EtcdMemberStatus(0xABC, 0xABC, 4096, 2048, 10, 2, False))
    bundles = SupportBundles(
        site.store, ClusterKeys(site.store), machine_logs(tmp_path), clients=ClientPool(dialer=site.machines)
    )
    files = unzip(await bundles.bundle(alpha, "User/alice", "Admin", {}))

    assert sorted(n for n in files if n.startswith("objects/")) == [
        "objects/ClusterMachine/m1.yaml",
        "objects/ClusterSecrets/alpha.yaml",
        "objects/Machine/m1.yaml",
    ]
    assert (
        yaml.safe_load(files["objects/ClusterSecrets/alpha.yaml"])["spec"] == "(left out: a sensitive kind)"
    )
    assert "ClusterMachine/m1\tReady\tFalse\tBooting" in files["conditions.txt"]
    assert [e["message"] for e in yaml.safe_load(files["events.yaml"])] == ["machine m1 connected"]
    assert [e["message"] for e in yaml.safe_load(files["audit.yaml"])] == ["update of alpha"]
    logs = files["machines/m1/logs.txt"]
    assert "kubelet: registered node m1" in logs and "joining with <redacted>" in logs
    assert "beta's" not in logs and "Linux version" not in logs  # its services' lines while in alpha
    assert files["machines/m1/dmesg.txt"].endswith(" Linux version 6.12\n")
    assert yaml.safe_load(files["etcd/members.yaml"])[0] | {"peer_urls": None} == {
        "id": "abc",
        "hostname": "m1",
        "peer_urls": None,
        "client_urls": [],
        "is_learner": False,
    }
    assert yaml.safe_load(files["etcd/status.yaml"])["m1"]["leader"] == "abc"
    assert [c.endpoint for c in site.machines.calls] == [ENDPOINT, ENDPOINT]
    assert all(c.secure for c in site.machines.calls)
    versions = yaml.safe_load(files["versions.yaml"])
    assert versions["machines"] == {
        "m1": {"talos": "v1.13.0", "desiredTalos": "v1.13.0", "kubernetes": "1.33.0"}
    }
    readme = files["README.txt"]
    assert all(f"  {name}\n" in readme for name in files)
    # What could not be gathered, and why.
    assert "kubernetes/version.json: https://127.0.0.1:9/version:" in readme
    assert "kubernetes/version.json" not in files

    secrets = bundle_secrets(load_secrets(secrets_bundle("1.13"), check_keys=False))
    assert not [(n, s[:8]) for n, text in files.items() for s in secrets if s in text]


async def test_a_bundle_shows_what_the_callers_role_may_see(sealed_site: Site, tmp_path: Path) -> None:
    site = sealed_site
    alpha = await two_clusters(site)
    site.machines.fail("etcd_member_list", Unavailable("etcd is not running"))
    bundles = SupportBundles(
        site.store, ClusterKeys(site.store), machine_logs(tmp_path), clients=ClientPool(dialer=site.machines)
    )

    reader = unzip(await bundles.bundle(alpha, "User/bob", "Reader", {}))
    assert "audit.yaml" not in reader
    assert "audit.yaml: the audit trail is for Admins and Support, not Reader" in reader["README.txt"]
    assert not any(
        "herder-support-only" in name or "herder-support-only" in text for name, text in reader.items()
    )
    assert "etcd/members.yaml: no control plane answered" in reader["README.txt"]
    assert "etcd is not running" in reader["etcd/status.yaml"]

    support = unzip(await bundles.bundle(alpha, "Support/carol", "Support", {}))
    assert "objects/ConfigPatch/herder-support-only.yaml" in support and "audit.yaml" in support


async def test_a_bundle_of_a_cluster_without_secrets_or_logs_says_what_is_missing(site: Site) -> None:
    (cluster,) = await site.create(
        obj("Cluster", "fresh", spec={"talosVersion": "v1.13.0", "kubernetesVersion": "1.33.0"})
    )
    files = unzip(
        await SupportBundles(site.store, ClusterKeys(site.store), None).bundle(cluster, "u", "Admin", {})
    )
    readme = files["README.txt"]
    assert "machines/*: this server keeps no machine logs" in readme
    assert "etcd, kubernetes: the cluster has no secrets yet" in readme
    assert sorted(files) == [
        "README.txt",
        "audit.yaml",
        "cluster.yaml",
        "conditions.txt",
        "events.yaml",
        "rollouts.yaml",
        "versions.yaml",
    ]
