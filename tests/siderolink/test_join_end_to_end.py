"""Machines herder cannot reach join it, end to end: three emulated machines, each in a network namespace
of its own behind NAT (no route to them from herder's namespace), boot with the kernel arguments of an infra
provider's JoinConfig, join over SideroLink and are reached through the tunnel only; they form a Ready 1+2
cluster and send their events and kernel logs to herder through the tunnel; a tunnel outage shows
Connected=False with the last handshake and heals without a reboot; a revoked join token refuses a fourth
machine; and a fifth, joined with a JoinToken revoked once it is in the cluster, boots again and rejoins
with what its config says.

Steps of one story (a module marked ``steps``: a failed step skips the ones after it).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from herder.emu.control.process import EmulatorProcess
from herder.emu.machine.join import Joiner
from tests.api.server import HERDER, stop
from tests.clusters.site import cluster, machine_set
from tests.siderolink.join_site import JoinServer, join_server, joined_emulator, needs_netns, sh

pytestmark = [needs_netns, pytest.mark.steps]

PROVIDER = "edge"


@dataclass
class Story:
    site: JoinServer
    workdir: Path
    emulator: EmulatorProcess | None = None
    machines: list[str] | None = None
    restarted: subprocess.Popen[bytes] | None = None
    """herder as started again by a step (its first process is the site's to stop)."""
    others: list[EmulatorProcess] = field(default_factory=list)
    """The emulators of the machines that join later."""

    def kubectl(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["/usr/bin/kubectl", "--kubeconfig", str(self.site.server.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {result.stdout}{result.stderr}")
        return result

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, *documents: dict[str, Any]) -> None:
        path = self.workdir / f"apply-{time.monotonic_ns()}.yaml"
        path.write_text(yaml.safe_dump_all(documents))
        self.kubectl("apply", "-f", str(path))

    def emulator_on(self, name: str, machines: int, join: str) -> EmulatorProcess:
        return joined_emulator(self.site, self.workdir / name, machines, join)


def until(check: Any, timeout: float = 90, what: str = "", shown: Any = None) -> Any:
    """Wait for ``check`` to answer something true; on a timeout, say what ``shown`` (or the check) saw."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    seen = shown() if shown is not None else last
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check}; last: {seen!r}")


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    found = [c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == kind]
    return found[0] if found else {}


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Story]:
    workdir = tmp_path_factory.mktemp("join")
    made: Story | None = None
    with join_server(workdir, "--siderolink-peer-timeout", "4") as site:
        made = Story(site, workdir)
        try:
            yield made
        finally:
            for process in (made.emulator, *made.others):
                if process is not None:
                    process.stop()
            if made.restarted is not None:
                stop(made.restarted)
            # An emulator killed before it cleaned up leaves its machines' namespaces: remove them.
            for uuid in made.machines or []:
                sh("ip", "netns", "del", Joiner.netns_of(uuid), check=False)


def test_three_machines_join_with_the_kernel_args_of_a_join_config(story: Story) -> None:
    story.apply(
        {
            "apiVersion": "herder.dev/v1alpha1",
            "kind": "InfraProvider",
            "metadata": {"name": PROVIDER},
            "spec": {"displayName": "machines in a customer's network"},
        }
    )
    join = until(lambda: story.get("joinconfig", PROVIDER)["spec"].get("kernelArgs"), what="a JoinConfig")
    assert join[0].startswith(f"siderolink.api={story.site.api}?jointoken=")
    story.emulator = story.emulator_on("emulator", 3, " ".join(join))
    story.machines = [m["uuid"] for m in story.emulator.published()]
    prefix = ipaddress.ip_network(story.site.prefix)

    def waiting() -> dict[str, Any]:
        """The machines not connected yet, with what their Connected condition says."""
        machines = {m["metadata"]["name"]: m for m in story.get("machines")["items"]}
        return {
            uuid: condition(machines[uuid], "Connected") if uuid in machines else "no Machine"
            for uuid in story.machines or []
            if uuid not in machines or condition(machines[uuid], "Connected").get("status") != "True"
        }

    def seen() -> dict[str, Any]:
        """What herder and the emulator say of the machines not connected yet (a timeout's message)."""
        assert story.emulator is not None
        emulated = {m["uuid"]: m for m in asyncio.run(story.emulator.control("GET", "/machines"))}
        links = {link["metadata"]["name"]: link for link in story.get("siderolinks")["items"]}
        return {
            uuid: {
                "machine": connected,
                "link": (links.get(uuid) or {}).get("status"),
                "emulator": {k: emulated.get(uuid, {}).get(k) for k in ("stage", "node", "last_error")},
            }
            for uuid, connected in waiting().items()
        }

    until(lambda: not waiting(), what="three joined machines connected", shown=seen)
    until(
        lambda: all(
            condition(story.get("siderolink", uuid), "Connected").get("status") == "True"
            for uuid in story.machines or []
        ),
        what="their tunnels up",
    )
    for uuid in story.machines:
        link = story.get("siderolink", uuid)
        assert link["spec"]["joinToken"] == f"provider/{PROVIDER}"
        assert condition(link, "Connected")["status"] == "True" and link["status"]["lastHandshake"], link
        machine = story.get("machine", uuid)
        address = ipaddress.ip_interface(link["spec"]["nodeAddress"]).ip
        assert address in prefix and machine["spec"]["endpoint"] == f"[{address}]:50000"
        assert machine["status"]["stage"] == "Maintenance"


def test_herder_reaches_them_only_through_the_tunnel(story: Story) -> None:
    assert story.machines is not None
    for uuid in story.machines:
        netns = Joiner.netns_of(uuid)
        shown = sh("ip", "netns", "exec", netns, "ip", "-6", "-o", "address", "show", "dev", "eth0").stdout
        lan = shown.split("inet6 ")[1].split("/")[0]
        # No route from herder's namespace to the machine's own network...
        with pytest.raises(OSError), socket.create_connection((lan, 50000), timeout=3):
            pass
        # ... and its Talos API listens on its tunnel address only.
        listening = sh("ip", "netns", "exec", netns, "ss", "-H", "-ltn").stdout.split()
        tunnel = ipaddress.ip_interface(story.get("siderolink", uuid)["spec"]["nodeAddress"]).ip
        assert f"[{tunnel}]:50000" in listening and not any(lan in word for word in listening)


def test_the_joined_machines_form_a_ready_cluster(story: Story) -> None:
    assert story.machines is not None
    control_plane, *workers = story.machines
    story.apply(
        cluster("edge"),
        machine_set("edge", "edge-control-planes", "controlplane", machines=[control_plane]),
        machine_set("edge", "edge-workers", "worker", machines=workers),
    )
    result = story.kubectl(
        "wait", "--for=condition=Ready", "cluster/edge", "--timeout=240s", check=False, timeout=300
    )
    assert result.returncode == 0, story.kubectl(
        "get", "clusters,clustermachines,machines", "-o", "wide"
    ).stdout
    kubeconfig = story.workdir / "edge.kubeconfig"
    story.site.herder("cluster", "kubeconfig", "edge", "-o", str(kubeconfig))
    nodes = subprocess.run(
        ["/usr/bin/kubectl", "--kubeconfig", str(kubeconfig), "get", "nodes", "-o", "name"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert nodes.returncode == 0, nodes.stderr
    assert len(nodes.stdout.split()) == 3


def test_events_and_kernel_logs_come_through_the_tunnel(story: Story) -> None:
    assert story.machines is not None
    for uuid in story.machines:
        status = until(
            lambda uuid=uuid: (
                (found := story.get("siderolink", uuid)["status"])
                and found.get("events", 0) > 0
                and found.get("kernelLogLines", 0) > 0
                and found
            ),
            what=f"events and kernel log lines of {uuid}",
        )
        assert status["lastEvent"].startswith("machine.") and status["lastEventAt"]
        # In the machine's logs, where herder keeps what the sink received: a joined machine's Dmesg is not
        # followed, so these lines came through the tunnel's kernel log.
        kept = story.site.herder("machine", "dmesg", uuid).stdout
        assert "[talos]" in kept and "kern: notice: [" in kept and "Linux version" in kept, kept


def _outage(netns: str, on: bool) -> None:
    if on:
        sh("ip", "netns", "exec", netns, "nft", "add", "table", "inet", "outage")
        for hook in ("input", "output"):
            sh(
                "ip", "netns", "exec", netns, "nft", "add", "chain", "inet", "outage", hook,
                f"{{ type filter hook {hook} priority 0 ; policy drop ; }}",
            )  # fmt: skip
    else:
        sh("ip", "netns", "exec", netns, "nft", "delete", "table", "inet", "outage")


def test_a_tunnel_outage_shows_and_heals_without_a_reboot(story: Story) -> None:
    assert story.machines is not None and story.emulator is not None
    worker = story.machines[2]
    before = asyncio.run(story.emulator.control("GET", f"/machines/{worker}"))
    _outage(Joiner.netns_of(worker), True)
    try:
        link = until(
            lambda: (
                (found := story.get("siderolink", worker))
                and condition(found, "Connected").get("status") == "False"
                and found
            ),
            what="the link down",
        )
        assert condition(link, "Connected")["reason"] == "HandshakeStale"
        assert (
            f"last handshake at {link['status']['lastHandshake']}" in condition(link, "Connected")["message"]
        )
        machine = until(
            lambda: (
                (found := story.get("machine", worker))
                and condition(found, "Connected").get("status") == "False"
                and found
            ),
            what="the machine disconnected",
        )
        message = condition(machine, "Connected")["message"]
        assert "SideroLink tunnel down" in message and "last handshake at" in message
    finally:
        _outage(Joiner.netns_of(worker), False)
    until(
        lambda: condition(story.get("machine", worker), "Connected").get("status") == "True",
        what="the machine connected again",
    )
    assert condition(story.get("siderolink", worker), "Connected")["status"] == "True"
    after = asyncio.run(story.emulator.control("GET", f"/machines/{worker}"))
    assert after["stage"] == "RUNNING" and before["stage"] == "RUNNING"
    assert "siderolink" not in (after.get("last_error") or "")
    story.kubectl("wait", "--for=condition=Ready", "cluster/edge", "--timeout=120s", timeout=150)


def test_herder_killed_and_started_again_keeps_its_joined_machines(story: Story) -> None:
    """Its key is kept and its peers are made again from the SideroLinks, where their machines last were:
    the machines need not rejoin, and are connected again within seconds."""
    assert story.machines is not None
    joined_at = {uuid: story.get("siderolink", uuid)["status"]["joinedAt"] for uuid in story.machines}
    connected_at = {uuid: story.get("machine", uuid)["status"]["connectedAt"] for uuid in story.machines}
    first = story.site.server.process
    first.kill()
    first.wait()
    until(
        lambda: sh("ip", "link", "show", story.site.interface, check=False).returncode != 0,
        what="herder's interface gone with its process",
    )
    with story.site.server.log.open("ab") as log:
        story.restarted = subprocess.Popen(first.args, stdout=log, stderr=subprocess.STDOUT)

    def connected() -> bool:
        result = story.kubectl("get", "machines", "-o", "json", check=False, timeout=30)
        if result.returncode != 0:
            return False
        machines = {m["metadata"]["name"]: m for m in json.loads(result.stdout)["items"]}
        # Connected anew (what the killed herder last wrote says nothing of the new one).
        return all(
            condition(machines[uuid], "Connected").get("status") == "True"
            and machines[uuid]["status"]["connectedAt"] != connected_at[uuid]
            for uuid in joined_at
        )

    # At once, herder making the handshakes: the machines alone would only when they rekey (two minutes).
    until(connected, timeout=40, what="the joined machines connected to the new herder")
    for uuid, at in joined_at.items():
        assert story.get("siderolink", uuid)["status"]["joinedAt"] == at  # no rejoin
    story.kubectl("wait", "--for=condition=Ready", "cluster/edge", "--timeout=120s", timeout=150)


def test_a_revoked_token_refuses_a_fourth_machine(story: Story) -> None:
    token = story.site.herder("jointoken", "create", "spare").stdout.strip()
    story.site.herder("jointoken", "revoke", "spare")
    fourth = story.emulator_on("fourth", 1, f"siderolink.api={story.site.api}?jointoken={token}")
    story.others.append(fourth)
    (uuid,) = [m["uuid"] for m in fourth.published()]
    assert story.machines is not None
    story.machines.append(uuid)
    summary = until(
        lambda: (
            (found := asyncio.run(fourth.control("GET", f"/machines/{uuid}")))
            and "PERMISSION_DENIED" in (found.get("last_error") or "")
            and found
        ),
        what="the fourth machine refused",
    )
    assert "the join token is not valid" in summary["last_error"]
    assert story.kubectl("get", "siderolink", uuid, check=False).returncode != 0
    assert story.kubectl("get", "machine", uuid, check=False).returncode != 0
    events = story.get("auditevents")["items"]
    assert any(
        e["spec"]["user"] == f"machine:{uuid}" and "join token spare is revoked" in e["spec"]["message"]
        for e in events
    )


def _rejoins(story: Story, uuid: str) -> int:
    """How many times the machine joined again with its own token, as the audit trail says."""
    return sum(
        e["spec"]["user"] == f"machine:{uuid}" and "rejoined with its own token" in e["spec"]["message"]
        for e in story.get("auditevents")["items"]
    )


def test_a_machine_reboots_joining_as_its_config_says_once_its_join_token_is_revoked(story: Story) -> None:
    """herder keeps only a JoinToken's digest, so the config it generates for a machine that joined with one
    carries the machine's own rejoin token: the machine, rebooted (through herder's Talos API gateway and
    the tunnel) or powered off and on with the same kernel arguments, joins as its config says (as Talos
    prefers its SideroLinkConfig), and revoking the JoinToken stops new machines only."""
    assert story.machines is not None
    token = story.site.herder("jointoken", "create", "rack").stdout.strip()
    fifth = story.emulator_on("fifth", 1, f"siderolink.api={story.site.api}?jointoken={token}")
    story.others.append(fifth)
    (uuid,) = [m["uuid"] for m in fifth.published()]
    story.machines.append(uuid)

    def emulated() -> dict[str, Any]:
        return dict(asyncio.run(fifth.control("GET", f"/machines/{uuid}")))

    until(
        lambda: (
            condition(story.get("machine", uuid), "Connected").get("status") == "True"
            if story.kubectl("get", "machine", uuid, check=False).returncode == 0
            else False
        ),
        what="the fifth machine joined",
        shown=emulated,
    )
    assert story.get("siderolink", uuid)["spec"]["joinToken"] == "rack"
    # A cluster of its own: an emulator's machines are in clusters of that emulator's only.
    story.apply(cluster("rack"), machine_set("rack", "rack-control-planes", "controlplane", machines=[uuid]))
    story.kubectl("wait", "--for=condition=Ready", "cluster/rack", "--timeout=240s", timeout=270)
    story.site.herder("jointoken", "revoke", "rack")
    talosconfig = story.workdir / "rack.talosconfig"
    story.site.herder("cluster", "talosconfig", "rack", "-o", str(talosconfig))

    def reboot() -> None:
        rebooted = subprocess.run(
            [HERDER, "talos", "--talosconfig", str(talosconfig), "-n", uuid, "reboot"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert rebooted.returncode == 0, rebooted.stdout + rebooted.stderr

    def power_cycle() -> None:
        asyncio.run(fifth.control("POST", f"/machines/{uuid}/power", {"state": "off"}))
        asyncio.run(fifth.control("POST", f"/machines/{uuid}/power", {"state": "on"}))

    for boot_again in (reboot, power_cycle):
        before, rejoined = emulated(), _rejoins(story, uuid)
        boot_again()
        until(
            lambda before=before: (
                (found := emulated())["boots"] > before["boots"] and found["stage"] == "RUNNING"
            ),
            timeout=120,
            what=f"the fifth machine running again after {boot_again.__name__}",
            shown=emulated,
        )
        assert "siderolink" not in (emulated().get("last_error") or "")
        assert _rejoins(story, uuid) == rejoined + 1, boot_again.__name__
        story.kubectl("wait", "--for=condition=Ready", "cluster/rack", "--timeout=120s", timeout=150)
