"""Emulated clusters end to end: configs from herder's Talos library applied to 3 control planes and 2 workers
over the Talos API, one bootstrap, the kubeconfig from the Talos API, and the real kubectl against the
cluster's emulated Kubernetes API."""

from __future__ import annotations

import base64
import json
import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from herder.emu.control.emulator import Emulator
from herder.emu.machine.lifecycle import Machine
from herder.talos.contracts import VersionContract
from herder.talos.kubeconfig import generate_admin_kubeconfig
from herder.talos.machine import AlreadyExists
from tests.emu.clusters import (
    KUBECTL,
    api_endpoint,
    client_files,
    etcd_healthy,
    eventually,
    form_cluster,
    nodes_ready,
)
from tests.emu.support import admin, cluster_configs, running_emulator

pytestmark = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl is not installed")

STATIC = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


async def test_a_cluster_forms_and_kubectl_sees_it(emulator: Emulator, tmp_path: Path) -> None:
    formed = await form_cluster(emulator, "kubectl", tmp_path)
    configs = formed.configs
    for machine in formed.control_planes:
        assert await etcd_healthy(formed, machine)

    # A second bootstrap is refused, on the first control plane and on any other.
    for machine in formed.control_planes[:2]:
        async with admin(configs, machine) as client:
            with pytest.raises(AlreadyExists, match="etcd data directory is not empty"):
                await client.bootstrap()

    names = {m.hostname.lower() for m in formed.control_planes + formed.workers}
    await eventually(lambda: _all_ready(formed, names))
    out = (await formed.kubectl("get", "nodes")).stdout
    header, *rows = out.splitlines()
    assert header.split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert len(rows) == 5 and all(r.split()[1] == "Ready" for r in rows)
    roles = sorted(r.split()[2] for r in rows)
    assert roles == ["<none>", "<none>", "control-plane", "control-plane", "control-plane"]
    assert {r.split()[4] for r in rows} == {"v1.33.0"}

    nodes = (await formed.kubectl_json("get", "nodes"))["items"]
    control_plane = next(
        n for n in nodes if n["metadata"]["name"] == formed.control_planes[0].hostname.lower()
    )
    assert control_plane["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] == ""
    assert control_plane["spec"]["taints"] == [
        {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
    ]
    assert control_plane["status"]["nodeInfo"]["kubeletVersion"] == "v1.33.0"

    pods = (await formed.kubectl_json("get", "pods", "-n", "kube-system"))["items"]
    by_name = {p["metadata"]["name"]: p for p in pods}
    for machine in formed.control_planes:
        for component in STATIC:
            pod = by_name[f"{component}-{machine.hostname.lower()}"]
            assert pod["status"]["phase"] == "Running"
            assert pod["spec"]["containers"][0]["image"] == f"registry.k8s.io/{component}:v1.33.0"
    assert sum(1 for n in by_name if n.startswith("kube-proxy-")) == 5
    assert sum(1 for n in by_name if n.startswith("coredns-")) == 2
    table = (await formed.kubectl("get", "pods", "-n", "kube-system")).stdout
    assert table.splitlines()[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    cells = {r.split()[0]: r.split()[1:4] for r in table.splitlines()[1:]}
    assert cells[f"kube-apiserver-{formed.control_planes[0].hostname.lower()}"] == ["1/1", "Running", "0"]

    # The add-ons' workloads, counted from their pods.
    out = (await formed.kubectl("rollout", "status", "daemonset/kube-proxy", "-n", "kube-system")).stdout
    assert "successfully rolled out" in out
    deployment = await formed.kubectl_json("get", "deployment", "coredns", "-n", "kube-system")
    assert deployment["status"]["readyReplicas"] == 2

    version = json.loads((await formed.kubectl("version", "-o", "json")).stdout)
    assert version["serverVersion"]["gitVersion"] == "v1.33.0"


async def _all_ready(formed: Any, names: set[str]) -> bool:
    ready = await nodes_ready(formed)
    return set(ready) == names and all(ready.values())


async def test_configmaps_and_secrets_survive_snapshot_and_recovery(
    emulator: Emulator, tmp_path: Path
) -> None:
    formed = await form_cluster(emulator, "source", tmp_path / "source", control_planes=1, workers=0)
    # kubectl's typed create commands send these as protobuf.
    await formed.kubectl("create", "namespace", "apps")
    await formed.kubectl("create", "configmap", "settings", "-n", "apps", "--from-literal=color=blue")
    await formed.kubectl("create", "secret", "generic", "token", "-n", "apps", "--from-literal=value=s3cret")
    header, row = (await formed.kubectl("get", "cm", "settings", "-n", "apps")).stdout.splitlines()
    assert header.split() == ["NAME", "DATA", "AGE"] and row.split()[:2] == ["settings", "1"]
    header, row = (await formed.kubectl("get", "secret", "token", "-n", "apps")).stdout.splitlines()
    assert header.split() == ["NAME", "TYPE", "DATA", "AGE"] and row.split()[:3] == ["token", "Opaque", "1"]

    async with admin(formed.configs, formed.control_planes[0]) as client:
        snapshot = await client.etcd_snapshot()
    # Secrets are encrypted at rest with the cluster's key: the snapshot holds none in the clear.
    assert (
        b"s3cret" not in snapshot and base64.b64encode(b"s3cret") not in snapshot and b"settings" in snapshot
    )

    # A cluster restored with encryption secrets of its own cannot read them, as kube-apiserver cannot.
    stranger = await form_cluster(
        emulator, "stranger", tmp_path / "stranger", control_planes=1, workers=0, snapshot=snapshot
    )
    cm = await stranger.kubectl_json("get", "configmap", "settings", "-n", "apps")
    assert cm["data"] == {"color": "blue"}
    refused = await stranger.kubectl("get", "secret", "token", "-n", "apps", check=False)
    assert refused.returncode != 0
    assert 'unable to transform key "/registry/secrets/apps/token"' in refused.stderr, refused.stderr

    legacy = next(yaml.safe_load_all(formed.configs.controlplane))
    source_secret = legacy["cluster"]["secretboxEncryptionSecret"]

    def same_encryption(doc: dict[str, Any]) -> None:
        doc["cluster"]["secretboxEncryptionSecret"] = source_secret

    restored = await form_cluster(
        emulator,
        "restored",
        tmp_path / "restored",
        control_planes=1,
        workers=0,
        snapshot=snapshot,
        edit_controlplane=same_encryption,
    )
    assert restored.cluster.id != formed.cluster.id
    cm = await restored.kubectl_json("get", "configmap", "settings", "-n", "apps")
    assert cm["data"] == {"color": "blue"}
    secret = await restored.kubectl_json("get", "secret", "token", "-n", "apps")
    assert base64.b64decode(secret["data"]["value"]) == b"s3cret"
    # The restored cluster's own control plane registered beside the nodes the snapshot remembers.
    ready = await nodes_ready(restored)
    assert ready[restored.control_planes[0].hostname.lower()] is True
    assert ready[formed.control_planes[0].hostname.lower()] is False


async def test_control_planes_that_do_not_register_are_not_nodes(emulator: Emulator, tmp_path: Path) -> None:
    def skip_registration(doc: dict[str, Any]) -> None:
        doc["machine"].setdefault("kubelet", {})["skipNodeRegistration"] = True

    formed = await form_cluster(emulator, "managed", tmp_path, edit_controlplane=skip_registration)
    workers = {m.hostname.lower() for m in formed.workers}
    await eventually(lambda: _all_ready(formed, workers))
    rows = (await formed.kubectl("get", "nodes", "--no-headers")).stdout.splitlines()
    assert {r.split()[0] for r in rows} == workers
    pods = (await formed.kubectl_json("get", "pods", "-n", "kube-system"))["items"]
    assert not [p for p in pods if p["metadata"]["name"].startswith(STATIC)]
    assert {p["spec"].get("nodeName") for p in pods} <= workers


async def test_a_kubernetes_upgrade_shows_in_pods_and_nodes(emulator: Emulator, tmp_path: Path) -> None:
    formed = await form_cluster(emulator, "upgrade", tmp_path, control_planes=1, workers=1)
    configs = formed.configs
    upgraded = cluster_configs("upgrade", api_endpoint(formed.control_planes[0]), kubernetes_version="1.33.4")
    for machine, config in (
        (formed.control_planes[0], upgraded.controlplane),
        (formed.workers[0], upgraded.worker),
    ):
        async with admin(configs, machine) as client:
            await client.apply_configuration(config)

    async def upgraded_everywhere() -> bool:
        nodes = (await formed.kubectl_json("get", "nodes"))["items"]
        pods = (await formed.kubectl_json("get", "pods", "-n", "kube-system"))["items"]
        images = {
            c["image"] for p in pods for c in p["spec"]["containers"] if "registry.k8s.io/kube" in c["image"]
        }
        versions = {n["status"]["nodeInfo"]["kubeletVersion"] for n in nodes}
        return versions == {"v1.33.4"} and {i.rsplit(":", 1)[1] for i in images} == {"v1.33.4"}

    await eventually(upgraded_everywhere)
    version = json.loads((await formed.kubectl("version", "-o", "json")).stdout)
    assert version["serverVersion"]["gitVersion"] == "v1.33.4"


async def test_failures_show_in_nodes(emulator: Emulator, tmp_path: Path) -> None:
    formed = await form_cluster(emulator, "failures", tmp_path)
    worker, lost_cp = formed.workers[0], formed.control_planes[2]
    await eventually(
        lambda: _all_ready(formed, {m.hostname.lower() for m in formed.control_planes + formed.workers})
    )
    await worker.power_off()
    await lost_cp.inject("partition")
    await eventually(lambda: formed.healthy_members() == 2)
    member = formed.cluster.member_of(lost_cp.uuid)
    assert member is not None and not formed.cluster.healthy(member)

    async def dropped_out() -> bool:
        ready = await nodes_ready(formed)
        return not ready[worker.hostname.lower()] and not ready[lost_cp.hostname.lower()]

    await eventually(dropped_out)
    _header, *rows = (await formed.kubectl("get", "nodes")).stdout.splitlines()
    statuses = {r.split()[0]: r.split()[1] for r in rows}
    assert statuses[worker.hostname.lower()] == "NotReady"
    assert statuses[formed.workers[1].hostname.lower()] == "Ready"
    selector = f"--field-selector=involvedObject.kind=Node,involvedObject.name={worker.hostname.lower()}"
    events = (await formed.kubectl_json("get", "events", selector))["items"]
    assert [e["reason"] for e in events] == ["RegisteredNode", "NodeReady", "NodeNotReady"]
    # The pods of a node that stopped answering are no longer ready.
    pods = (await formed.kubectl_json("get", "pods", "-n", "kube-system"))["items"]
    on_lost = [p for p in pods if p["spec"].get("nodeName") == lost_cp.hostname.lower()]
    assert on_lost and not any(c["ready"] for p in on_lost for c in p["status"]["containerStatuses"])

    # What others set on a node (a cordon, a label) stays when its kubelet comes back.
    await formed.kubectl("cordon", worker.hostname.lower())
    await formed.kubectl("label", "node", worker.hostname.lower(), "team=blue")
    await lost_cp.inject("heal")
    worker.power_on()
    await eventually(lambda: formed.healthy_members() == 3)
    await eventually(
        lambda: _all_ready(formed, {m.hostname.lower() for m in formed.control_planes + formed.workers})
    )
    node = await formed.kubectl_json("get", "node", worker.hostname.lower())
    assert node["spec"]["unschedulable"] is True and node["metadata"]["labels"]["team"] == "blue"
    # What a drain reads: the pods of one node, by field selector; and kubectl describe works.
    selector = f"--field-selector=spec.nodeName={worker.hostname.lower()}"
    names = (await formed.kubectl("get", "pods", "-A", selector, "-o", "name")).stdout.split()
    assert names and all(
        n.startswith(("pod/kube-proxy-", "pod/kube-flannel-", "pod/coredns-")) for n in names
    )
    described = (await formed.kubectl("describe", "node", worker.hostname.lower())).stdout
    assert "SchedulingDisabled" not in described and "Unschedulable:      true" in described


async def test_each_control_plane_serves_the_api_on_its_address(emulator: Emulator, tmp_path: Path) -> None:
    """As kube-apiserver: each control plane serves the cluster's API on its own address, port 6443, while it
    runs, so a load balancer in front of them reaches and health-checks each; the kubeconfig generated from
    the cluster's secrets for any of them works."""
    formed = await form_cluster(emulator, "apiservers", tmp_path)
    first, second, third = formed.control_planes
    cluster, ca, _crt, _key = client_files(formed, tmp_path)
    assert cluster["server"] == api_endpoint(first)
    for machine in formed.control_planes:
        assert await _readyz(machine, ca) == (200, "ok")
    # Workers run no API server.
    with pytest.raises(httpx.ConnectError):
        await _readyz(formed.workers[0], ca)

    # kubectl through the second control plane, with a kubeconfig herder makes from the cluster's secrets.
    formed.kubeconfig.write_text(
        generate_admin_kubeconfig(
            formed.configs.secrets.k8s, cluster_name="apiservers", endpoint=api_endpoint(second)
        )
    )
    names = {m.hostname.lower() for m in formed.control_planes + formed.workers}
    await eventually(lambda: _all_ready(formed, names))

    # A control plane that stops refuses connections; the others keep serving, and it serves again once back.
    await third.power_off()
    await eventually(lambda: _refused(third, ca))
    assert await _readyz(second, ca) == (200, "ok")
    third.power_on()
    await eventually(lambda: _serves(third, ca))
    summary = emulator.services.summary(formed.cluster)
    assert [a["url"] for a in summary["kubernetes"]] == sorted(api_endpoint(m) for m in formed.control_planes)


async def _readyz(machine: Machine, ca: Path) -> tuple[int, str]:
    async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(ca)), timeout=5) as http:
        response = await http.get(f"{api_endpoint(machine)}/readyz")
    return response.status_code, response.text


async def _refused(machine: Machine, ca: Path) -> bool:
    try:
        await _readyz(machine, ca)
    except httpx.ConnectError:
        return True
    return False


async def _serves(machine: Machine, ca: Path) -> bool:
    try:
        return await _readyz(machine, ca) == (200, "ok")
    except httpx.TransportError:
        return False


async def test_a_cluster_of_the_typed_config_documents(tmp_path: Path) -> None:
    """Contracts from 1.14 carry Kubernetes settings in typed documents (KubeNodeConfig, KubeletConfig…)."""
    async with running_emulator(tmp_path / "emu", 0) as emulator:
        for _ in range(2):
            emulator.create_machine(talos_version="v1.14.0")
        formed = await form_cluster(
            emulator,
            "typed",
            tmp_path,
            control_planes=1,
            workers=1,
            contract=VersionContract.parse("1.14"),
            kubernetes_version="1.33.2",
        )
        names = {m.hostname.lower() for m in formed.control_planes + formed.workers}
        await eventually(lambda: _all_ready(formed, names))
        control_plane = await formed.kubectl_json("get", "node", formed.control_planes[0].hostname.lower())
        assert control_plane["spec"]["taints"][0]["key"] == "node-role.kubernetes.io/control-plane"
        assert control_plane["status"]["nodeInfo"]["kubeletVersion"] == "v1.33.2"
        pods = (await formed.kubectl_json("get", "pods", "-n", "kube-system"))["items"]
        assert {p["metadata"]["name"].rsplit("-", 3)[0] for p in pods} >= {"kube-apiserver", "kube-scheduler"}


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}], **spec},
    }


async def test_pods_anyone_creates_are_scheduled_and_run(emulator: Emulator, tmp_path: Path) -> None:
    formed = await form_cluster(emulator, "workloads", tmp_path, control_planes=1, workers=1)
    worker, control_plane = formed.workers[0].hostname.lower(), formed.control_planes[0].hostname.lower()
    on_control_plane = _pod(
        "on-control-plane",
        nodeSelector={"node-role.kubernetes.io/control-plane": ""},
        tolerations=[{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}],
    )
    items = [_pod("web"), on_control_plane, _pod("nowhere", nodeSelector={"disk": "ssd"})]
    await formed.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(item) for item in items))

    async def placed() -> bool:
        pods = {p["metadata"]["name"]: p for p in (await formed.kubectl_json("get", "pods"))["items"]}
        return all(p.get("status", {}).get("phase") for p in pods.values())

    await eventually(placed)
    pods = {p["metadata"]["name"]: p for p in (await formed.kubectl_json("get", "pods"))["items"]}
    # The control plane's taint keeps a pod that does not tolerate it on the worker.
    assert pods["web"]["spec"]["nodeName"] == worker and pods["web"]["status"]["phase"] == "Running"
    assert pods["on-control-plane"]["spec"]["nodeName"] == control_plane
    assert pods["nowhere"]["status"]["phase"] == "Pending" and "nodeName" not in pods["nowhere"]["spec"]
    rows = {
        r.split()[0]: r.split()[1:3] for r in (await formed.kubectl("get", "pods")).stdout.splitlines()[1:]
    }
    assert rows["web"] == ["1/1", "Running"] and rows["nowhere"] == ["0/1", "Pending"]

    await formed.workers[0].power_off()

    async def web_not_ready() -> bool:
        web = await formed.kubectl_json("get", "pod", "web")
        return not web["status"]["containerStatuses"][0]["ready"]

    await eventually(web_not_ready)
