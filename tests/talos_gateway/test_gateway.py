"""herder's Talos API gateway end to end: a real ``herder serve`` forms clusters on the emulator, users of
each role download their talosconfig with ``herder cluster talosconfig`` and call their machines through
herder with ``herder talos`` and with raw gRPC as talosctl speaks it, and herder checks, relays and
audits every call."""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import json
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2

from herder.talos import pki
from herder.talos.api.common import common_pb2
from herder.talos.api.cosi import state_pb2, state_pb2_grpc
from herder.talos.api.machine import machine_pb2, machine_pb2_grpc
from herder.talos.machine import Credentials, MachineClient, PermissionDenied, Unauthenticated
from herder.talos.machine import resources as res
from herder.talos.talosconfig import Talosconfig, issue_client_certificate, load_talosconfig_file
from tests.api.server import HERDER, free_port, support_token_file
from tests.clusters.site import Site, cluster, machine_set, running_site
from tests.data import TALOS_PROTOS

ROLES = ("Reader", "Operator", "Admin")
TALOS_ROLES = {"Reader": "os:reader", "Operator": "os:operator", "Admin": "os:admin", "Support": "os:admin"}


@pytest.fixture(scope="module")
def support_token(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return support_token_file(tmp_path_factory.mktemp("support"))


@pytest.fixture(scope="module")
def gateway_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def site(
    tmp_path_factory: pytest.TempPathFactory, support_token: tuple[Path, str], gateway_port: int
) -> Iterator[Site]:
    args = ("--support-token-file", str(support_token[0]), "--talos-listen", f"127.0.0.1:{gateway_port}")
    with running_site(tmp_path_factory.mktemp("gateway"), 3, *args) as s:
        cp, worker, other = (m["uuid"] for m in s.machines)
        s.apply(
            [
                cluster("alpha"),
                machine_set("alpha", "alpha-control-planes", "controlplane", machines=[cp]),
                machine_set("alpha", "alpha-workers", "worker", machines=[worker]),
                cluster("beta"),
                machine_set("beta", "beta-control-planes", "controlplane", machines=[other]),
            ]
        )
        s.wait("cluster", "alpha", timeout=180)
        s.wait("cluster", "beta", timeout=180)
        yield s


@pytest.fixture(scope="module")
def kubeconfigs(site: Site, support_token: tuple[Path, str]) -> dict[str, Path]:
    """A kubeconfig per role: ServiceAccounts made with ``herder serviceaccount create``, and Support's."""
    out = {}
    for role in ROLES:
        path = site.workdir / f"{role.lower()}.kubeconfig"
        name = f"gw-{role.lower()}"
        site.run("herder", "serviceaccount", "create", name, "--role", role, "--write-kubeconfig", str(path))
        out[role] = path
    out["Support"] = site.server.kubeconfig_for(support_token[1], "support")
    return out


def _talosconfig(site: Site, kubeconfig: Path, name: str, cluster_name: str = "alpha") -> Path:
    path = site.workdir / f"{name}.talosconfig"
    result = site.server.run(
        "herder", "cluster", "talosconfig", cluster_name, "-o", str(path), kubeconfig=kubeconfig
    )
    assert result.returncode == 0, result.stderr
    return path


@pytest.fixture(scope="module")
def talosconfigs(site: Site, kubeconfigs: dict[str, Path]) -> dict[str, Path]:
    return {role: _talosconfig(site, kubeconfig, role.lower()) for role, kubeconfig in kubeconfigs.items()}


def _nodes(site: Site) -> dict[str, str]:
    """The address of each machine: ``cp`` and ``worker`` of alpha, ``other`` (beta's control plane)."""
    return dict(zip(("cp", "worker", "other"), (m["node"] for m in site.machines), strict=True))


def _talos(talosconfig: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HERDER, "talos", "--talosconfig", str(talosconfig), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{result.args}: {result.stdout}{result.stderr}"
    return result.stdout


def _audit(site: Site, user: str) -> list[dict[str, Any]]:
    events = site.get(
        "auditevents", None, "-l", f"herder.dev/audit-kind=Machine,herder.dev/audit-user={user}"
    )
    return [e["spec"] for e in events["items"]]


def _client(talosconfig: Path, node: str) -> MachineClient:
    return MachineClient.from_talosconfig(load_talosconfig_file(talosconfig), node=node, timeout=20)


def test_talosconfigs_point_at_herder_with_a_certificate_of_their_holder(
    site: Site, talosconfigs: dict[str, Path], gateway_port: int
) -> None:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    for role, path in talosconfigs.items():
        config: Talosconfig = load_talosconfig_file(path)
        context = config.current()
        assert config.context == "alpha"
        assert context.endpoints == (f"127.0.0.1:{gateway_port}",)
        cert = x509.load_pem_x509_certificate(context.crt)
        subject = cert.subject
        holder = "support:platform" if role == "Support" else f"serviceaccount:gw-{role.lower()}"
        assert subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == holder
        assert [a.value for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
            TALOS_ROLES[role]
        ]
        lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
        assert lifetime.total_seconds() <= 3600 + 300  # --ttl's default, and the few minutes it is backdated


def test_every_role_reads_its_machines_through_herder(site: Site, talosconfigs: dict[str, Path]) -> None:
    nodes = _nodes(site)
    for role in ROLES:
        config = talosconfigs[role]
        version = _ok(_talos(config, "-n", nodes["worker"], "version"))
        assert "Tag:" in version and nodes["worker"] in version, version
        services = _ok(_talos(config, "-n", nodes["cp"], "services"))
        assert "etcd" in services and "kubelet" in services
        members = _ok(_talos(config, "-n", nodes["cp"], "etcd", "members"))
        # alpha's one etcd member, as its control plane sees it.
        assert len(members.splitlines()) == 1 and f"https://{nodes['cp']}:2380" in members, members
        uuid = _ok(_talos(config, "-n", nodes["worker"], "get", "systeminformation", "-o", "json"))
        assert json.loads(uuid)["spec"]["uuid"] == site.machines[1]["uuid"]
        events = _ok(_talos(config, "-n", nodes["worker"], "events", "--tail", "3", "--duration", "2"))
        assert len(events.splitlines()) >= 3, events


def test_a_node_is_named_by_its_hostname_as_talos_reports_it(
    site: Site, talosconfigs: dict[str, Path]
) -> None:
    worker = site.machines[1]
    machines = asyncio.run(site.emulator.control("GET", "/machines"))
    hostname = next(m["hostname"] for m in machines if m["uuid"] == worker["uuid"])
    site.until(
        lambda: site.get("machine", worker["uuid"]).get("status", {}).get("hostname") == hostname,
        what="the worker's hostname on its Machine",
    )
    version = _ok(_talos(talosconfigs["Reader"], "-n", hostname, "version"))
    assert "Tag:" in version and hostname in version, version


def test_a_resource_watch_and_an_event_stream_relay_as_they_come(
    site: Site, talosconfigs: dict[str, Path]
) -> None:
    nodes = _nodes(site)

    async def watch() -> tuple[Any, Any]:
        async with _client(talosconfigs["Reader"], nodes["cp"]) as client:
            changes = client.watch_resources(res.RUNTIME, res.MACHINE_STATUS, res.MACHINE_STATUS_ID)
            first = await asyncio.wait_for(anext(changes), 10)
            await changes.aclose()
            events = client.events(tail_events=1)
            event = await asyncio.wait_for(anext(events), 10)
            await events.aclose()
            return first, event

    first, event = asyncio.run(watch())
    assert first.type == res.ResourceEventType.CREATED
    assert first.resource.typed(res.MachineStatusSpec).machine_stage.name == "RUNNING"
    assert event.id


def test_what_herder_manages_is_refused_to_every_role_naming_the_call(
    site: Site, talosconfigs: dict[str, Path]
) -> None:
    """As Omni's proxy: configs, upgrades, resets, bootstrap, etcd membership and snapshots, the admin
    kubeconfig are herder's to do; the gateway refuses them to everyone, Support too."""
    nodes = _nodes(site)
    config = site.workdir / "empty-config.yaml"
    config.write_text("version: v1alpha1\n")
    for role in ("Admin", "Support"):
        for args, call in (
            (("kubeconfig", str(site.workdir / "k")), "Kubeconfig"),
            (("etcd", "snapshot", str(site.workdir / "s")), "EtcdSnapshot"),
            (("apply-config", "-f", str(config)), "ApplyConfiguration"),
            (("upgrade", "--image", "ghcr.io/siderolabs/installer:v1.13.10"), "Upgrade"),
            (("reset",), "Reset"),
            (("bootstrap",), "Bootstrap"),
            (("etcd", "leave"), "EtcdLeaveCluster"),
        ):
            refused = _talos(talosconfigs[role], "-n", nodes["cp"], *args)
            assert refused.returncode == 1, (role, args, refused.stdout)
            assert f"/machine.MachineService/{call} is not allowed through herder's Talos API gateway" in (
                refused.stderr
            ), (role, refused.stderr)
    assert not (site.workdir / "k").exists() and not (site.workdir / "s").exists()
    assert site.stage_of(site.machines[0]["uuid"]) == "Running"
    refusals = site.until(
        lambda: [
            e
            for e in _audit(site, "serviceaccount.gw-admin")
            if e["verb"] == "Kubeconfig" and e["code"] == 403 and "not allowed" in e["message"]
        ],
        what="the refused Kubeconfig in the audit trail",
    )
    assert refusals[0]["result"] == "Failure"


def test_the_machine_still_enforces_what_talos_enforces_per_role(
    site: Site, talosconfigs: dict[str, Path]
) -> None:
    """Talos's table lets a Reader read resources, but a sensitive type only os:admin: the gateway reaches the
    machine with the Reader's role, not with herder's os:admin, so the machine says no."""
    cp = _nodes(site)["cp"]
    refused = _talos(talosconfigs["Reader"], "-n", cp, "get", "kubeletspecs")
    assert refused.returncode == 1 and "not authorized" in refused.stderr, refused.stderr
    spec = json.loads(_ok(_talos(talosconfigs["Admin"], "-n", cp, "get", "kubeletspecs", "-o", "json")))
    assert spec["spec"]["image"].startswith("ghcr.io/siderolabs/kubelet:")


def test_an_admin_acts_on_services_and_etcd_and_a_reader_may_not(
    site: Site, talosconfigs: dict[str, Path]
) -> None:
    cp = _nodes(site)["cp"]
    assert 'Service "kubelet" restarted' in _ok(
        _talos(talosconfigs["Admin"], "-n", cp, "service", "kubelet", "restart")
    )
    assert "etcd defragmented" in _ok(_talos(talosconfigs["Admin"], "-n", cp, "etcd", "defrag"))
    assert "no alarms to disarm" in _ok(_talos(talosconfigs["Admin"], "-n", cp, "etcd", "alarm", "disarm"))
    assert "no alarms" in _ok(_talos(talosconfigs["Reader"], "-n", cp, "etcd", "alarm", "list"))
    assert 'Service "kubelet" stopped' in _ok(
        _talos(talosconfigs["Admin"], "-n", cp, "service", "kubelet", "stop")
    )
    assert 'Service "kubelet" started' in _ok(
        _talos(talosconfigs["Admin"], "-n", cp, "service", "kubelet", "start")
    )
    hostname = next(
        m["hostname"] for m in asyncio.run(site.emulator.control("GET", "/machines")) if m["node"] == cp
    )
    apiserver = f"kube-system/kube-apiserver-{hostname}"
    assert f"restarted {apiserver}" in _ok(
        _talos(talosconfigs["Admin"], "-n", cp, "restart", "-k", apiserver)
    )
    # alpha's one member leads and has no one to hand leadership to: Talos answers with no member.
    assert "leadership forfeited" in _ok(
        _talos(talosconfigs["Admin"], "-n", cp, "etcd", "forfeit-leadership")
    )
    refusals = {
        "ServiceRestart": ("service", "kubelet", "restart"),
        "ServiceStop": ("service", "kubelet", "stop"),
        "ServiceStart": ("service", "kubelet", "start"),
        "Restart": ("restart", "-k", apiserver),
        "EtcdForfeitLeadership": ("etcd", "forfeit-leadership"),
        "EtcdDefragment": ("etcd", "defrag"),
    }
    for args in refusals.values():
        refused = _talos(talosconfigs["Reader"], "-n", cp, *args)
        assert refused.returncode == 1 and "not authorized" in refused.stderr, (args, refused.stderr)
    # On the wire: PERMISSION_DENIED, as Talos's authorizer answers (the gateway relays the machine's word).
    for call in ("ServiceStart", "ServiceStop", "Restart", "EtcdForfeitLeadership"):
        denied = _raw_unary(talosconfigs["Reader"], call, cp)
        assert denied.code() == grpc.StatusCode.PERMISSION_DENIED, (call, denied)
        assert denied.details() == "not authorized", (call, denied.details())
    # Each refusal is audited under the call's name; each of the Admin's calls too.
    site.until(
        lambda: (
            {e["verb"] for e in _audit(site, "serviceaccount.gw-reader") if e["code"] == 403} >= set(refusals)
        ),
        what="the Reader's refused calls, by name, in the audit trail",
    )
    site.until(
        lambda: (
            {e["verb"] for e in _audit(site, "serviceaccount.gw-admin") if e["code"] == 200} >= set(refusals)
        ),
        what="the Admin's calls, by name, in the audit trail",
    )


def _raw_unary(talosconfig: Path, call: str, node: str) -> grpc.aio.AioRpcError:
    """The error a unary machine API call with an empty request answers (a write the caller may not make),
    on the wire as talosctl speaks it."""

    async def go() -> grpc.aio.AioRpcError:
        async with _channel(talosconfig) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await channel.unary_unary(f"/machine.MachineService/{call}")(
                    b"", metadata=(("node", node),), timeout=20
                )
            return refused.value

    return asyncio.run(go())


def _streamed(talosconfig: Path, *args: str, lines: int) -> list[str]:
    """The first lines a following ``herder talos`` command prints, then it is interrupted."""
    process = subprocess.Popen(
        [HERDER, "talos", "--talosconfig", str(talosconfig), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        got = [process.stdout.readline() for _ in range(lines)]
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        return got
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_logs_and_dmesg_stream_through_herder(site: Site, talosconfigs: dict[str, Path]) -> None:
    nodes = _nodes(site)
    kubelet = _streamed(talosconfigs["Reader"], "-n", nodes["worker"], "logs", "kubelet", "-f", lines=2)
    assert all(line.startswith(f"{nodes['worker']}: I") for line in kubelet), kubelet
    assert any("Successfully registered node" in line for line in kubelet), kubelet
    kernel = _streamed(talosconfigs["Reader"], "-n", nodes["worker"], "dmesg", "-f", lines=3)
    assert "Linux version" in kernel[0] and kernel[0].startswith(f"{nodes['worker']}: kern:"), kernel
    # Not following: the whole log, then the command ends.
    machined = _ok(_talos(talosconfigs["Reader"], "-n", nodes["cp"], "logs", "machined", "--tail", "2"))
    assert len(machined.splitlines()) == 2 and "[talos]" in machined


def test_a_talos_client_that_is_not_herders_reads_every_read_only_call(
    site: Site, talosconfigs: dict[str, Path]
) -> None:
    """Bindings generated from Talos's own machine.proto and resource definitions, plain grpc, a talosconfig
    from herder: every read-only call of the machine API, and the resources talosctl get and dashboard read,
    through the gateway, decoded as Talos's messages."""
    nodes = _nodes(site)
    result = subprocess.run(
        [sys.executable, str(Path(__file__).parent / "talos_client.py"), str(TALOS_PROTOS),
         str(site.workdir / "talos-bindings"), str(talosconfigs["Admin"]), nodes["cp"], nodes["worker"]],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    emulated = {m["node"]: m for m in asyncio.run(site.emulator.control("GET", "/machines"))}
    cp = emulated[nodes["cp"]]
    assert seen["hostname"] == cp["hostname"] == seen["read_hostname"].strip()
    assert seen["version"] == cp["talos_version"]
    first, second = seen["memory"]
    assert int(first["memtotal"]) == cp["hardware"]["memory_mib"] * 1024
    assert 0 < int(second["memfree"]) < int(second["memtotal"]) and first["memfree"] != second["memfree"]
    assert 0 < seen["loadavg"]["load1"] < cp["hardware"]["cpus"]
    commands = {p["command"] for p in seen["processes"]}
    assert {"machined", "apid", "etcd", "kubelet", "kube-apiserver"} <= commands
    assert len(seen["systemstat"]["cpu"]) == len(seen["cpuinfo"]) == cp["hardware"]["cpus"]
    assert int(seen["systemstat"]["boot_time"]) > 0 and seen["systemstat"]["cpu_total"]["user"] > 0
    assert seen["diskstats"]["devices"][0]["name"] == "sda"
    (disk,) = seen["disks"]
    (emulated_disk,) = cp["hardware"]["disks"]
    assert (disk["device_name"], int(disk["size"])) == (emulated_disk["name"], emulated_disk["size"])
    assert disk["type"] == "HDD" and disk["system_disk"] and disk["model"] == emulated_disk["model"]
    assert {d["name"] for d in seen["netdev"]["devices"]} == {"lo", "eth0"}
    assert "/var" in {m["mounted_on"] for m in seen["mounts"]}
    assert {c["name"] for c in seen["containers"]} >= {"kube-apiserver"}
    assert {s["id"] for s in seen["stats"]} == {"apid", "trustd", "etcd"}
    assert {(r["localport"], r["process"]["name"]) for r in seen["netstat"]} >= {
        (50000, "apid"),
        (2379, "etcd"),
    }
    assert seen["etcd_status"]["member_id"] and not seen["etcd_alarms"].get("member_alarms")
    assert [m["hostname"] for m in seen["etcd_members"]] == [cp["hostname"]]
    assert "kubelet" in seen["services"] and "etcd" not in seen["services"]  # the worker's
    assert len(seen["logs_tail"].splitlines()) == 1 and "registered node" in seen["logs_tail"]
    assert seen["logs_follow"] and seen["logs_follow"][0].startswith("[talos] ")
    assert seen["dmesg"][0].startswith("kern:  notice: [") and "Linux version" in seen["dmesg"][0]
    assert len(seen["dmesg_follow"]) == 2
    assert seen["read"] == 10 << 20
    assert "/etc/hostname" in seen["list"]
    assert seen["usage"]["/usr"] >= (10 << 20)
    assert len(seen["events"]) == 3 and all(t.startswith("talos/runtime/machine.") for t in seen["events"])
    _assert_resources_decode_as_talos_writes_them(seen["resources"], cp, emulated[nodes["worker"]])


def _ip(encoded: str) -> str:
    return str(ipaddress.ip_address(base64.b64decode(encoded)))


def _assert_resources_decode_as_talos_writes_them(
    seen: dict[str, Any], cp: dict[str, Any], worker: dict[str, Any]
) -> None:
    """What talosctl get and the dashboard read: each spec by Talos's own message says what its YAML says,
    and both say what the emulated control plane is."""
    members = {m["proto"]["hostname"]: m for m in seen["members"]}
    assert set(members) == {cp["hostname"], worker["hostname"]}
    for member in members.values():
        proto, yaml_spec = member["proto"], member["yaml"]
        assert [_ip(a["ip"]) for a in proto["addresses"]] == yaml_spec["addresses"]
        role = {"TYPE_CONTROL_PLANE": "controlplane", "TYPE_WORKER": "worker"}[proto["machine_type"]]
        assert role == yaml_spec["machineType"] and proto["node_id"] == yaml_spec["nodeId"]
    assert members[cp["hostname"]]["proto"]["machine_type"] == "TYPE_CONTROL_PLANE"
    current = next(a for a in seen["addresses"] if a["id"] == "current")
    prefixes = [f"{_ip(a['ip'])}/{a['prefix_length']}" for a in current["proto"]["addresses"]]
    assert prefixes == current["yaml"]["addresses"] and prefixes[0].startswith(cp["node"] + "/")
    assert {a["id"] for a in seen["addresses"]} >= {"current", "default", "accumulative", "routed"}
    on_link = next(r for r in seen["routes"] if r["proto"]["scope"] == "SCOPE_LINK")
    assert on_link["proto"]["out_link_name"] == on_link["yaml"]["outLinkName"] == "eth0"
    assert _ip(on_link["proto"]["source"]["ip"]) == on_link["yaml"]["src"] == cp["node"]
    links = {link["id"]: link for link in seen["links"]}
    assert set(links) == {"eth0", "lo"}
    eth0 = links["eth0"]
    assert (
        eth0["proto"]["mtu"] == eth0["yaml"]["mtu"] and eth0["proto"]["operational_state"] == "OPER_STATE_UP"
    )
    mac = base64.b64decode(eth0["proto"]["hardware_addr"]).hex(":")
    assert mac == eth0["yaml"]["hardwareAddr"]
    assert seen["hostname"][0]["proto"]["hostname"] == cp["hostname"]
    services = {s["id"]: s for s in seen["services"]}
    assert {"apid", "etcd", "kubelet", "machined"} <= set(services)
    assert services["etcd"]["proto"] == {"running": True, "healthy": True}
    assert services["etcd"]["yaml"] == {"running": True, "healthy": True, "unknown": False}
    for status in (seen["machinestatus"][0], seen["get_worker_status"], seen["watch_first"]):
        assert status["id"] == "machine" and status["yaml"]["stage"] == "running"
        assert status["proto"] == {"stage": "MACHINE_STAGE_RUNNING", "status": {"ready": True}}
    assert seen["watch_first"]["event"] == "CREATED"
    assert seen["extensions"] == []  # machines of no Image Factory schematic run no extension


def test_a_reader_is_refused_what_changes_a_machine_and_an_admin_is_not(
    site: Site, talosconfigs: dict[str, Path]
) -> None:
    nodes = _nodes(site)
    refused = _talos(talosconfigs["Reader"], "-n", nodes["worker"], "reboot")
    assert refused.returncode == 1 and "not authorized" in refused.stderr, refused.stderr

    async def reader_reboots() -> None:
        async with _client(talosconfigs["Reader"], nodes["worker"]) as client:
            await client.reboot()

    with pytest.raises(PermissionDenied, match="not authorized"):
        asyncio.run(reader_reboots())
    # An Operator may not read a file: Talos keeps Read to os:admin.
    refused = _talos(talosconfigs["Operator"], "-n", nodes["cp"], "read", "/etc/hostname")
    assert refused.returncode == 1 and "not authorized" in refused.stderr, refused.stderr

    _ok(_talos(talosconfigs["Admin"], "-n", nodes["worker"], "reboot"))
    site.until(
        lambda: (
            _talos(talosconfigs["Reader"], "-n", nodes["worker"], "version", "--timeout", "2").returncode == 0
        ),
        timeout=60,
        what="the rebooted worker to answer again",
    )
    # Shutdown likewise: refused to the Reader, done for the Admin; the worker is then powered on again
    # (as its cloud would), so the module's other tests find it as before.
    refused = _talos(talosconfigs["Reader"], "-n", nodes["worker"], "shutdown")
    assert refused.returncode == 1 and "not authorized" in refused.stderr, refused.stderr
    assert _raw_unary(talosconfigs["Reader"], "Shutdown", nodes["worker"]).code() == (
        grpc.StatusCode.PERMISSION_DENIED
    )
    worker = site.machines[1]["uuid"]
    _ok(_talos(talosconfigs["Admin"], "-n", nodes["worker"], "shutdown"))
    try:
        site.until(
            lambda: asyncio.run(site.emulator.control("GET", f"/machines/{worker}"))["power"] == "off",
            timeout=60,
            what="the worker to power off",
        )
    finally:
        asyncio.run(site.emulator.control("POST", f"/machines/{worker}/power", {"state": "on"}))
    site.until(
        lambda: (
            _talos(talosconfigs["Reader"], "-n", nodes["worker"], "version", "--timeout", "2").returncode == 0
        ),
        timeout=90,
        what="the worker, powered on again, to answer",
    )
    events = _audit(site, "serviceaccount.gw-reader")
    reboot = [e for e in events if e["verb"] == "Reboot"]
    assert reboot and all(e["code"] == 403 and e["result"] == "Failure" for e in reboot), reboot
    assert reboot[0]["name"] == site.machines[1]["uuid"] and reboot[0]["subresource"] == "talos"
    assert nodes["worker"] in reboot[0]["message"]
    admin = site.until(
        lambda: [
            e for e in _audit(site, "serviceaccount.gw-admin") if e["verb"] == "Reboot" and e["code"] == 200
        ],
        what="the Admin's reboot in the audit trail",
    )
    assert admin[0]["role"] == "Admin"
    site.until(
        lambda: (
            {
                (user, e["code"])
                for user in ("serviceaccount.gw-reader", "serviceaccount.gw-admin")
                for e in _audit(site, user)
                if e["verb"] == "Shutdown"
            }
            >= {("serviceaccount.gw-reader", 403), ("serviceaccount.gw-admin", 200)}
        ),
        what="the refused and the done Shutdown in the audit trail",
    )


def test_a_machine_the_platform_manages_is_refused_below_support(
    site: Site, kubeconfigs: dict[str, Path], talosconfigs: dict[str, Path]
) -> None:
    nodes = _nodes(site)
    cp = site.machines[0]["uuid"]
    support = site.server.run(
        "kubectl", "annotate", "machine", cp, "herder.dev/read-only=true", kubeconfig=kubeconfigs["Support"]
    )
    assert support.returncode == 0, support.stderr
    try:
        for role in ROLES:
            refused = _talos(talosconfigs[role], "-n", nodes["cp"], "version")
            assert refused.returncode == 1 and "managed by the platform" in refused.stderr, (
                role,
                refused.stderr,
            )
            # The workers work as before.
            _ok(_talos(talosconfigs[role], "-n", nodes["worker"], "version"))
        assert "Tag:" in _ok(_talos(talosconfigs["Support"], "-n", nodes["cp"], "version"))
        assert "etcd" in _ok(_talos(talosconfigs["Support"], "-n", nodes["cp"], "services"))
    finally:
        site.server.run(
            "kubectl", "annotate", "machine", cp, "herder.dev/read-only-", kubeconfig=kubeconfigs["Support"]
        )
    refusal = site.until(
        lambda: [
            e for e in _audit(site, "serviceaccount.gw-operator") if "managed by the platform" in e["message"]
        ],
        what="the refusal in the audit trail",
    )
    assert refusal[0]["code"] == 403 and refusal[0]["name"] == cp


def test_nodes_of_other_clusters_and_unknown_ones_are_not_found(
    site: Site, talosconfigs: dict[str, Path]
) -> None:
    nodes = _nodes(site)
    answers = {}
    for node in (nodes["other"], "127.254.254.254", "no-such-host"):
        refused = _talos(talosconfigs["Admin"], "-n", node, "version")
        assert refused.returncode == 1, refused.stdout
        answers[node] = refused.stderr.replace(node, "NODE")
    # The same words whatever the reason: nothing tells a node of another cluster from none.
    assert len(set(answers.values())) == 1, answers
    assert "is not a machine of cluster alpha" in answers[nodes["other"]]
    # beta's own talosconfig reaches it.
    beta = _talosconfig(site, site.server.kubeconfig, "beta-admin", "beta")
    assert "Tag:" in _ok(_talos(beta, "-n", nodes["other"], "version"))


def test_the_certificate_of_a_deleted_account_stops_working(site: Site) -> None:
    path = site.workdir / "temp.kubeconfig"
    site.run(
        "herder", "serviceaccount", "create", "temp", "--role", "Operator", "--write-kubeconfig", str(path)
    )
    config = _talosconfig(site, path, "temp")
    worker = _nodes(site)["worker"]
    _ok(_talos(config, "-n", worker, "version"))
    site.run("kubectl", "delete", "serviceaccount", "temp")
    refused = _talos(config, "-n", worker, "version")
    assert refused.returncode == 1 and "no longer exists" in refused.stderr, refused.stderr
    # Made again under the same name, the account does not inherit the old certificate.
    site.run("herder", "serviceaccount", "create", "temp", "--role", "Operator")
    refused = _talos(config, "-n", worker, "version")
    assert refused.returncode == 1 and "no longer exists" in refused.stderr, refused.stderr


# --- the wire, as talosctl speaks it (grpc-go's TLS, `nodes` metadata) ---------------------------


def _channel(talosconfig: Path) -> grpc.aio.Channel:
    context = load_talosconfig_file(talosconfig).current()
    credentials = grpc.ssl_channel_credentials(
        root_certificates=context.ca, private_key=context.key, certificate_chain=context.crt
    )
    return grpc.aio.secure_channel(context.endpoints[0], credentials)


def test_nodes_metadata_fans_out_with_each_node_named_in_its_reply(
    site: Site, talosconfigs: dict[str, Path]
) -> None:
    nodes = _nodes(site)

    async def call() -> machine_pb2.VersionResponse:
        async with _channel(talosconfigs["Reader"]) as channel:
            stub = machine_pb2_grpc.MachineServiceStub(channel)  # type: ignore[no-untyped-call]
            metadata = (("nodes", nodes["cp"]), ("nodes", nodes["worker"]), ("nodes", nodes["other"]))
            reply: machine_pb2.VersionResponse = await stub.Version(
                empty_pb2.Empty(), metadata=metadata, timeout=20
            )
            return reply

    reply = asyncio.run(call())
    by_node = {m.metadata.hostname: m for m in reply.messages}
    assert set(by_node) == set(nodes.values())
    assert by_node[nodes["cp"]].version.tag.startswith("v1.13") and not by_node[nodes["cp"]].metadata.error
    failed = common_pb2.Empty.FromString(by_node[nodes["other"]].SerializeToString()).metadata
    assert failed.error.startswith("rpc error: code = NotFound desc = ")
    assert failed.status.code == grpc.StatusCode.NOT_FOUND.value[0]


def test_a_stream_to_several_nodes_merges_their_messages(site: Site, talosconfigs: dict[str, Path]) -> None:
    nodes = _nodes(site)

    async def call() -> list[machine_pb2.Event]:
        async with _channel(talosconfigs["Reader"]) as channel:
            stub = machine_pb2_grpc.MachineServiceStub(channel)  # type: ignore[no-untyped-call]
            wanted = {nodes["cp"], nodes["worker"], "127.254.254.254"}
            metadata = tuple(("nodes", node) for node in sorted(wanted))
            stream = stub.Events(machine_pb2.EventsRequest(tail_events=2), metadata=metadata)
            got: list[machine_pb2.Event] = []
            async for event in stream:
                got.append(event)
                if {e.metadata.hostname for e in got} == wanted:
                    break
            stream.cancel()
            return got

    events = asyncio.run(asyncio.wait_for(call(), 30))
    by_node: dict[str, list[machine_pb2.Event]] = {}
    for event in events:
        by_node.setdefault(event.metadata.hostname, []).append(event)
    assert set(by_node) == {nodes["cp"], nodes["worker"], "127.254.254.254"}, by_node.keys()
    assert all(e.id and not e.metadata.error for n in ("cp", "worker") for e in by_node[nodes[n]])
    assert "code = NotFound" in by_node["127.254.254.254"][0].metadata.error


def test_the_resource_api_is_one_to_one_and_a_call_must_name_its_node(
    site: Site, talosconfigs: dict[str, Path]
) -> None:
    nodes = _nodes(site)
    request = state_pb2.GetRequest(
        namespace=res.HARDWARE, type=res.SYSTEM_INFORMATION, id=res.SYSTEM_INFORMATION_ID
    )

    async def call(metadata: tuple[tuple[str, str], ...]) -> Any:
        async with _channel(talosconfigs["Reader"]) as channel:
            stub = state_pb2_grpc.StateStub(channel)  # type: ignore[no-untyped-call]
            return await stub.Get(request, metadata=metadata, timeout=20)

    got = asyncio.run(call((("node", nodes["worker"]),)))
    assert got.resource.metadata.id == res.SYSTEM_INFORMATION_ID
    for metadata, code, words in (
        (
            (("nodes", nodes["worker"]),),
            grpc.StatusCode.INVALID_ARGUMENT,
            "one-2-many proxying is not supported",
        ),
        ((), grpc.StatusCode.INVALID_ARGUMENT, "-n NODE"),
        ((("node", "127.254.254.254"),), grpc.StatusCode.NOT_FOUND, "is not a machine of cluster alpha"),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            asyncio.run(call(metadata))
        assert refused.value.code() == code and words in (refused.value.details() or ""), refused.value


def test_a_client_without_a_talosconfig_certificate_does_not_get_in(site: Site, gateway_port: int) -> None:
    ca = load_talosconfig_file(site.workdir / "reader.talosconfig").current().ca

    async def call() -> None:
        async with grpc.aio.secure_channel(
            f"127.0.0.1:{gateway_port}", grpc.ssl_channel_credentials(root_certificates=ca)
        ) as channel:
            stub = machine_pb2_grpc.MachineServiceStub(channel)  # type: ignore[no-untyped-call]
            await stub.Version(empty_pb2.Empty(), metadata=(("node", _nodes(site)["worker"]),), timeout=5)

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        asyncio.run(call())
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


def _tls_refusal(gateway_port: int, ca: bytes, client: tuple[bytes, bytes] | None) -> str:
    """How the gateway's TLS ends a connection with the client certificate given (or none): the alert the
    client reads (in TLS 1.3 the server judges the client's certificate after the client's handshake)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=ca.decode())
    context.set_alpn_protocols(["h2"])
    if client is not None:
        pki.load_cert_chain(context, *client)
    raw = socket.create_connection(("127.0.0.1", gateway_port), timeout=10)
    with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls, pytest.raises(ssl.SSLError) as refused:
        tls.recv(1)
    return str(refused.value.reason)


def test_a_refused_client_certificate_is_told_why_by_a_tls_alert(
    site: Site, gateway_port: int, talosconfigs: dict[str, Path]
) -> None:
    ca = load_talosconfig_file(talosconfigs["Reader"]).current().ca
    assert _tls_refusal(gateway_port, ca, None) == "TLSV13_ALERT_CERTIFICATE_REQUIRED"
    stranger = pki.new_ca(pki.KeyType.ECDSA_P256, organization="elsewhere")
    theirs = issue_client_certificate(stranger, ("os:admin",))
    assert _tls_refusal(gateway_port, ca, (theirs.crt, theirs.key)) == "TLSV1_ALERT_UNKNOWN_CA"
    # herder's client (which speaks grpc's own TLS to the gateway) says why, and does not retry.

    async def call() -> None:
        credentials = Credentials(ca, theirs.crt, theirs.key)
        async with MachineClient(f"127.0.0.1:{gateway_port}", credentials=credentials, node="x") as client:
            await client.version()

    with pytest.raises(Unauthenticated, match="refused the client certificate"):
        asyncio.run(call())


def test_a_call_the_gateway_does_not_have_is_answered_as_talos_answers_and_audited(
    site: Site, talosconfigs: dict[str, Path]
) -> None:
    async def call(path: str) -> grpc.aio.AioRpcError:
        async with _channel(talosconfigs["Operator"]) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await channel.unary_unary(path)(b"", metadata=(("node", _nodes(site)["worker"]),), timeout=20)
            return refused.value

    talos_only = asyncio.run(call("/machine.MachineService/Copy"))
    assert talos_only.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "/machine.MachineService/Copy is not allowed through herder's Talos API gateway" in (
        talos_only.details() or ""
    )
    unknown = asyncio.run(call("/machine.MachineService/NoSuchCall"))
    assert unknown.code() == grpc.StatusCode.UNIMPLEMENTED
    assert unknown.details() == "unknown method NoSuchCall for service machine.MachineService"
    service = asyncio.run(call("/nowhere.Service/Call"))
    assert (
        service.code() == grpc.StatusCode.UNIMPLEMENTED
        and service.details() == "unknown service nowhere.Service"
    )
    events = site.until(
        lambda: [
            e for e in _audit(site, "serviceaccount.gw-operator") if e["verb"] in ("NoSuchCall", "Call")
        ],
        what="the unknown calls in the audit trail",
    )
    assert {e["code"] for e in events} == {501}, events
    assert any("/machine.MachineService/NoSuchCall: UNIMPLEMENTED" in e["message"] for e in events), events


def test_calls_show_in_the_audit_trail(site: Site, talosconfigs: dict[str, Path]) -> None:
    worker = _nodes(site)["worker"]
    _ok(_talos(talosconfigs["Operator"], "-n", worker, "version"))
    events = site.until(
        lambda: [
            e
            for e in _audit(site, "serviceaccount.gw-operator")
            if e["verb"] == "Version" and e["code"] == 200
        ],
        what="the Operator's Version call in the audit trail",
    )
    event = events[-1]
    assert event["user"] == "serviceaccount:gw-operator" and event["role"] == "Operator"
    assert event["kind"] == "Machine" and event["name"] == site.machines[1]["uuid"]
    assert event["message"].startswith(f"/machine.MachineService/Version on node {worker}: OK")
    assert event["sourceAddress"] == "127.0.0.1"
    # A watch is audited when it ends, which the previous test's caller did only just now.
    site.until(
        lambda: [
            e
            for e in _audit(site, "serviceaccount.gw-reader")
            if e["verb"] == "Watch" and "streamed until the caller ended the call" in e["message"]
        ],
        what="the Reader's ended watch in the audit trail",
    )


def test_a_break_glass_talosconfig_reaches_the_machines_straight_and_only_an_admin_gets_one(
    site: Site, kubeconfigs: dict[str, Path]
) -> None:
    """``herder cluster talosconfig NAME --break-glass``: an os:admin talosconfig signed by the cluster's
    own Talos CA, whose endpoints are its control planes themselves (not the gateway); Admin only, audited,
    and marked on the cluster."""
    path = site.workdir / "break-glass.talosconfig"
    for role in ("Reader", "Operator"):
        refused = site.server.run(
            "herder",
            "cluster",
            "talosconfig",
            "alpha",
            "--break-glass",
            "-o",
            str(path),
            kubeconfig=kubeconfigs[role],
        )
        assert refused.returncode != 0 and not path.exists(), refused.stderr
    made = site.server.run(
        "herder",
        "cluster",
        "talosconfig",
        "alpha",
        "--break-glass",
        "--ttl",
        "600",
        "-o",
        str(path),
        kubeconfig=kubeconfigs["Admin"],
    )
    assert made.returncode == 0, made.stderr
    config = load_talosconfig_file(path)
    context = config.current()
    cp = site.machines[0]
    assert context.endpoints == (cp["endpoint"],)  # the control plane, not herder's gateway
    cert = pki.load_certificate(context.crt)
    assert [a.value for a in cert.subject] == ["os:admin"]
    assert cert.issuer == pki.load_certificate(context.ca).subject  # the cluster's own Talos CA
    assert 500 < (cert.not_valid_after_utc - cert.not_valid_before_utc).total_seconds() <= 600
    nodes = _nodes(site)
    version = _ok(_talos(path, "-n", nodes["worker"], "version"))
    assert nodes["worker"] in version  # proxied by the control plane's apid, as Talos does
    members = _ok(_talos(path, "-n", nodes["cp"], "etcd", "members"))
    assert f"https://{nodes['cp']}:2380" in members
    events = site.get("auditevents", None, "-l", "herder.dev/audit-kind=Cluster")["items"]
    issued = [e["spec"] for e in events if e["spec"]["subresource"] == "talosconfig-break-glass"]
    assert [(e["user"], e["result"]) for e in issued if e["result"] == "Success"] == [
        ("serviceaccount:gw-admin", "Success")
    ]
    assert {e["user"] for e in issued if e["result"] == "Failure"} == {
        "serviceaccount:gw-reader",
        "serviceaccount:gw-operator",
    }
    marked = site.get("cluster", "alpha")["metadata"]["annotations"]["herder.dev/break-glass-issued"]
    assert marked.endswith(" serviceaccount:gw-admin")
