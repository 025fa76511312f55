"""Emulated clusters: etcd membership and quorum through the Talos API, and the emulated Kubernetes API's
security (client certificates against the cluster's CA), watches and persistence."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import ssl
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from cryptography import x509

from herder.emu.control.api import ControlAPI
from herder.emu.control.emulator import Emulator
from herder.resources.kubernetes import NODE, node_ready
from herder.talos import pki
from herder.talos.machine import FailedPrecondition, MachineStage, Unavailable
from tests.emu.clusters import Formed, api_endpoint, client_files, etcd_healthy, eventually, form_cluster
from tests.emu.support import (
    admin,
    bring_up,
    herder_cli,
    random_cidr,
    running_emulator,
    wait_stage,
)


async def test_a_control_plane_removed_as_herder_does_leaves_two_healthy_members(
    emulator: Emulator, tmp_path: Path
) -> None:
    formed = await form_cluster(emulator, "scale-down", tmp_path, workers=0)
    first, second, third = formed.control_planes
    assert formed.cluster.current_leader() == formed.cluster.member_of(first.uuid)
    async with admin(formed.configs, first) as client:
        assert await client.etcd_forfeit_leadership() in (second.hostname, third.hostname)
        assert formed.cluster.current_leader() != formed.cluster.member_of(first.uuid)
        await client.etcd_leave_cluster()
        # Its etcd stays stopped: it does not join again by itself.
        await asyncio.sleep(0.2)
        assert formed.cluster.member_of(first.uuid) is None
        await client.reset(graceful=True, reboot=True)
    await wait_stage(emulator, first, MachineStage.MAINTENANCE)
    async with admin(formed.configs, second) as client:
        members = await client.etcd_member_list()
    assert sorted(m.hostname for m in members) == sorted([second.hostname, third.hostname])
    assert formed.healthy_members() == 2
    for machine in (second, third):
        assert await etcd_healthy(formed, machine)

    # Configured again, the wiped machine boots and joins as a new member.
    await bring_up(emulator, first, formed.configs.controlplane)
    await eventually(lambda: formed.healthy_members() == 3)


async def test_quorum_rules(emulator: Emulator, tmp_path: Path) -> None:
    formed = await form_cluster(emulator, "quorum", tmp_path, workers=0)
    first, second, third = formed.control_planes
    lost = formed.cluster.member_of(third.uuid)
    assert lost is not None
    await second.power_off()
    await third.power_off()
    assert not formed.cluster.has_quorum() and formed.cluster.current_leader() is None
    assert not await etcd_healthy(formed, first)
    async with admin(formed.configs, first) as client:
        # Without quorum etcd changes no membership, and Kubernetes writes are refused.
        with pytest.raises(Unavailable, match="no leader"):
            await client.etcd_remove_member_by_id(lost.id)
        cluster, ca, crt, key = client_files(formed, tmp_path)
        async with httpx.AsyncClient(base_url=cluster["server"], verify=_context(ca, crt, key)) as http:
            refused = await http.post("/api/v1/namespaces/default/configmaps", json=_configmap("refused"))
            readyz, livez = await http.get("/readyz"), await http.get("/livez")
        assert refused.status_code == 503 and "etcdserver: no leader" in refused.json()["message"]
        assert readyz.status_code == 500 and "[-]etcd failed" in readyz.text
        assert livez.status_code == 200 and livez.text == "ok"
        # A read still works.
        await formed.kubectl("get", "nodes")

        second.power_on()
        await eventually(formed.cluster.has_quorum)
        await eventually(lambda: etcd_healthy(formed, first))
        # Removing a member whose loss would leave no quorum is refused (strict reconfiguration).
        second_member = formed.cluster.member_of(second.uuid)
        assert second_member is not None
        with pytest.raises(FailedPrecondition, match="not enough started members"):
            await client.etcd_remove_member_by_id(second_member.id)
        await client.etcd_remove_member_by_id(lost.id)
        assert len(await client.etcd_member_list()) == 2
    assert formed.healthy_members() == 2
    await formed.kubectl("apply", "-f", "-", input=json.dumps(_configmap("accepted")))
    assert (await formed.kubectl("get", "--raw", "/readyz")).stdout == "ok"


def _configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}}


def _context(ca: Path, crt: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    if crt is not None:
        context.load_cert_chain(str(crt), str(key) if key else None)
    return context


async def test_the_api_authenticates_client_certificates_of_the_cluster_ca(
    emulator: Emulator, tmp_path: Path
) -> None:
    formed = await form_cluster(emulator, "certs", tmp_path, control_planes=1, workers=0)
    cluster, ca, crt, key = client_files(formed, tmp_path)
    url = cluster["server"]
    # The kubeconfig from Talos names the cluster endpoint: here the control plane's own API server.
    assert url == api_endpoint(formed.control_planes[0])
    # kube-apiserver's serving certificate, from the cluster's Kubernetes CA, for the node's address, the
    # kubernetes Service and the config's SANs.
    parts = urlsplit(url)
    pem = await asyncio.to_thread(ssl.get_server_certificate, (parts.hostname, parts.port))
    served = x509.load_pem_x509_certificate(pem.encode())
    names = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "kubernetes.default.svc.cluster.local" in names.get_values_for_type(x509.DNSName)
    assert {ipaddress.ip_address(formed.control_planes[0].address), ipaddress.ip_address("10.96.0.1")} <= set(
        names.get_values_for_type(x509.IPAddress)
    )
    assert served.issuer == x509.load_pem_x509_certificate(ca.read_bytes()).subject
    async with httpx.AsyncClient(base_url=url, verify=_context(ca), timeout=10) as anonymous:
        assert (await anonymous.get("/version")).json()["gitVersion"] == "v1.33.0"
        response = await anonymous.get("/api/v1/namespaces")
        assert response.status_code == 401 and response.json()["kind"] == "Status"

    # A certificate of the cluster's CA without system:masters: authenticated, but there is no RBAC.
    control_plane = formed.control_planes[0].config
    assert control_plane is not None and control_plane.kubernetes_ca is not None
    now = datetime.now(UTC)
    developer = pki.issue_certificate(
        control_plane.kubernetes_ca,
        common_name="dev",
        organizations=["developers"],
        not_before=now - timedelta(minutes=1),
        not_after=now + timedelta(hours=1),
    )
    (tmp_path / "dev.pem").write_bytes(developer.crt + developer.key)
    async with httpx.AsyncClient(base_url=url, verify=_context(ca, tmp_path / "dev.pem"), timeout=10) as dev:
        response = await dev.get("/api/v1/namespaces/default/configmaps")
        assert response.status_code == 403
        assert 'User "dev" cannot list resource "configmaps"' in response.json()["message"]

    # A client of another cluster's CA does not get through the handshake.
    other = await form_cluster(emulator, "other", tmp_path / "other", control_planes=1, workers=0)
    _other, _ca, other_crt, other_key = client_files(other, tmp_path / "other")
    async with httpx.AsyncClient(
        base_url=url, verify=_context(ca, other_crt, other_key), timeout=10
    ) as stranger:
        with pytest.raises(httpx.TransportError):
            await stranger.get("/api/v1/namespaces")

    watched = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "watched"}, "data": {"a": "b"}}
    async with (
        httpx.AsyncClient(base_url=url, verify=_context(ca, crt, key), timeout=10) as admin_client,
        admin_client.stream("GET", "/api/v1/namespaces/default/configmaps?watch=1") as watch,
    ):
        created = await admin_client.post("/api/v1/namespaces/default/configmaps", json=watched)
        assert created.status_code == 201
        async for line in watch.aiter_lines():
            event = json.loads(line)
            if event["object"]["metadata"]["name"] == "watched":
                assert event["type"] == "ADDED" and event["object"]["data"] == {"a": "b"}
                break


async def test_the_cluster_and_its_objects_survive_a_restart(tmp_path: Path) -> None:
    cidr, data = random_cidr(), tmp_path / "emu"
    async with running_emulator(data, 1, cidr=cidr) as emulator:
        formed = await form_cluster(emulator, "restart", tmp_path, control_planes=1, workers=0)
        configs = formed.configs
        await formed.kubectl("apply", "-f", "-", input=json.dumps(_configmap("kept")))
        control = ControlAPI(emulator)
        base = await control.start("127.0.0.1", 0)
        try:
            async with httpx.AsyncClient(base_url=base, timeout=10) as http:
                summary = (await http.get(f"/clusters/{configs.name}")).json()
            code, out, _err = await herder_cli("emu", "clusters", "--url", base)
        finally:
            await control.stop()
        url = api_endpoint(formed.control_planes[0])
        assert code == 0 and out.split("\t")[:2] == [configs.name, "etcd 1/1 healthy"]
        assert out.rstrip().endswith(url)
        assert summary["quorum"] and summary["serving"] and len(summary["members"]) == 1
        assert summary["kubernetes"] == [
            {"url": url, "machine": formed.control_planes[0].uuid, "serving": True}
        ]
    async with running_emulator(data, 1, cidr=cidr) as emulator:
        machines = [*emulator.machines.values()]
        restarted = Formed(emulator, configs, machines, [], formed.kubeconfig, formed.cluster_id)
        await wait_stage(emulator, restarted.control_planes[0], MachineStage.RUNNING)
        await eventually(lambda: emulator.services.summary(restarted.cluster)["serving"])
        assert emulator.services.summary(restarted.cluster)["kubernetes"][0]["url"] == url
        cm = await restarted.kubectl_json("get", "configmap", "kept")
        assert cm["metadata"]["name"] == "kept"


async def test_a_destroyed_machine_drops_out(emulator: Emulator, tmp_path: Path) -> None:
    formed = await form_cluster(emulator, "destroyed", tmp_path, control_planes=1, workers=1)
    kubernetes = emulator.services.kubernetes[formed.cluster_id]
    worker = formed.workers[0]

    async def ready() -> bool:
        node = await kubernetes.store.get(NODE, worker.hostname.lower())
        return node_ready(node.to_dict())

    async def not_ready() -> bool:
        return not await ready()

    await eventually(ready)
    await emulator.destroy_machine(worker)
    await eventually(not_ready)
