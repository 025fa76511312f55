"""The Provision API end to end: an Admin makes join tokens with ``herder jointoken``; a machine calling
``sidero.link.ProvisionService/Provision`` with one (from the machines' side of the uplink, as a Talos
machine would) gets herder's WireGuard peer and its tunnel address, becomes a SideroLink and the Machine
of its UUID at that address, and keeps its address when it rejoins with a new key; a revoked, unknown or
missing token is refused with PERMISSION_DENIED, a malformed request with INVALID_ARGUMENT, each audited.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import time
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from herder.state.encryption import Cipher
from herder.talos.siderolink.rejoin import KEY_PURPOSE, rejoin_token
from herder.talos.siderolink.wireguard import generate_keys, public_key_of
from tests.siderolink.join_site import JoinServer, join_server, needs_netns, provision, token

pytestmark = needs_netns


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JoinServer]:
    with join_server(tmp_path_factory.mktemp("provision")) as made:
        yield made


def until(check: object, timeout: float = 30) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()  # type: ignore[operator]
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {check}")


def test_a_machine_with_a_valid_token_joins_and_becomes_its_machine(site: JoinServer) -> None:
    joined = token(site, "rack-1", "--description", "the first rack")
    node, keys = str(uuidlib.uuid4()), generate_keys()
    answer = provision(
        site, node_uuid=node, node_public_key=keys.public, join_token=joined, talos_version="v1.13.9"
    )
    assert answer["code"] == "OK", answer
    prefix = ipaddress.ip_network(site.prefix)
    address = ipaddress.ip_interface(str(answer["address"]))
    assert address.network == prefix and answer["server"] == str(prefix.network_address + 1)
    assert answer["endpoints"] == [f"[{site.uplink.herder_address}]:{site.wireguard_port}"]
    assert answer["key"] == public_key_of((site.server.data_dir / "siderolink.key").read_text().strip())
    # herder's interface has the machine as a peer, and its own address.
    shown = subprocess.run(["ip", "-6", "address", "show", site.interface], capture_output=True, text=True)
    assert f"{prefix.network_address + 1}/64" in shown.stdout
    link = site.kubectl_json("get", "siderolink", node)
    assert link["spec"] == {  # type: ignore[comparison-overlap]
        "nodePublicKey": keys.public,
        "nodeAddress": str(address),
        "joinToken": "rack-1",
        "talosVersion": "v1.13.9",
    }
    machine = until(lambda: _machine(site, node))
    assert machine["spec"] == {"endpoint": f"[{address.ip}]:50000"}  # type: ignore[index]
    listed = site.herder("jointoken", "list").stdout
    (line,) = [row for row in listed.splitlines() if row.startswith("rack-1")]
    assert line.split()[1:4] == ["valid", "never", "1"] and "the first rack" in line
    assert joined not in listed
    # A reboot: a new key, the same address; the old key is no peer any more.
    again = generate_keys()
    answer = provision(site, node_uuid=node, node_public_key=again.public, join_token=joined)
    assert answer["address"] == str(address)
    until(lambda: again.public in _peers(site) and keys.public not in _peers(site))


def _machine(site: JoinServer, node: str) -> dict[str, object] | None:
    result = subprocess.run(
        [
            "/usr/bin/kubectl",
            "--kubeconfig",
            str(site.server.kubeconfig),
            "get",
            "machine",
            node,
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return json.loads(result.stdout) if result.returncode == 0 else None


def _peers(site: JoinServer) -> str:
    from base64 import b64encode

    raw = Path(f"/var/run/wireguard/{site.interface}.sock")
    import socket

    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(raw))
        s.sendall(b"get=1\n\n")
        data = b""
        while not data.endswith(b"\n\n"):
            data += s.recv(65536)
    keys = [line[11:] for line in data.decode().splitlines() if line.startswith("public_key=")]
    return " ".join(b64encode(bytes.fromhex(k)).decode() for k in keys)


def test_a_machine_rejoins_with_its_own_token_while_its_siderolink_lasts(site: JoinServer) -> None:
    """The token the configs herder generates give a machine that joined with a JoinToken (which herder
    cannot write there: it keeps only its digest): that machine's only, even once the JoinToken is
    revoked, and no more once its SideroLink is deleted."""
    joined, node, other = token(site, "rack-2"), str(uuidlib.uuid4()), str(uuidlib.uuid4())
    first = provision(site, node_uuid=node, node_public_key=generate_keys().public, join_token=joined)
    assert first["code"] == "OK", first
    key = Cipher.from_file(site.server.data_dir / "encryption.key").derive(KEY_PURPOSE)
    own = rejoin_token(key, node)
    site.herder("jointoken", "revoke", "rack-2")
    again = provision(site, node_uuid=node, node_public_key=generate_keys().public, join_token=own)
    assert again["code"] == "OK" and again["address"] == first["address"], again
    assert site.kubectl_json("get", "siderolink", node)["spec"]["joinToken"] == "rack-2"
    refused = provision(site, node_uuid=other, node_public_key=generate_keys().public, join_token=own)
    assert refused["code"] == "PERMISSION_DENIED", refused
    forged = provision(
        site, node_uuid=node, node_public_key=generate_keys().public, join_token="hjr_" + "A" * 43
    )
    assert forged["code"] == "PERMISSION_DENIED", forged
    deleted = subprocess.run(
        ["/usr/bin/kubectl", "--kubeconfig", str(site.server.kubeconfig), "delete", "siderolink", node],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert deleted.returncode == 0, deleted.stderr
    gone = provision(site, node_uuid=node, node_public_key=generate_keys().public, join_token=own)
    assert gone["code"] == "PERMISSION_DENIED", gone
    messages = [e["spec"]["message"] for e in site.kubectl_json("get", "auditevents")["items"]]
    assert any("rejoined with its own token" in m for m in messages)
    assert any("not this machine's rejoin token" in m for m in messages)
    assert any("whose SideroLink is gone" in m for m in messages)
    assert not any(own in m for m in messages)


def test_revoked_unknown_and_missing_tokens_are_refused_and_audited(site: JoinServer) -> None:
    revoked = token(site, "old-rack")
    site.herder("jointoken", "revoke", "old-rack")
    node = str(uuidlib.uuid4())
    key = generate_keys().public
    for given in (revoked, "hjt_nobody_" + "0" * 64, ""):
        answer = provision(site, node_uuid=node, node_public_key=key, join_token=given)
        assert (answer["code"], answer["details"]) == ("PERMISSION_DENIED", "the join token is not valid")
    assert _machine(site, node) is None
    listed = site.herder("jointoken", "list").stdout
    assert [row.split()[1] for row in listed.splitlines() if row.startswith("old-rack")] == ["revoked"]
    events = site.kubectl_json("get", "auditevents")["items"]
    refusals = [
        e["spec"]["message"]  # type: ignore[index]
        for e in events  # type: ignore[attr-defined]
        if e["spec"]["user"] == f"machine:{node}"  # type: ignore[index]
    ]
    assert any("join token old-rack is revoked" in m for m in refusals), refusals
    assert any("join token nobody does not exist" in m for m in refusals), refusals


def test_a_malformed_request_says_which_field(site: JoinServer) -> None:
    valid = token(site, "for-bad-requests")
    key = generate_keys().public
    for fields, field in (
        ({"node_uuid": "not-a-uuid", "node_public_key": key}, "node_uuid"),
        ({"node_uuid": str(uuidlib.UUID(int=0)), "node_public_key": key}, "all zeros"),
        ({"node_uuid": str(uuidlib.uuid4()), "node_public_key": "short"}, "node_public_key"),
        (
            {"node_uuid": str(uuidlib.uuid4()), "node_public_key": key, "wireguard_over_grpc": True},
            "UDP only",
        ),
    ):
        answer = provision(site, **fields, join_token=valid)
        assert answer["code"] == "INVALID_ARGUMENT" and field in str(answer["details"]), answer


def test_an_expiring_token_and_a_bad_duration(site: JoinServer) -> None:
    token(site, "for-a-day", "--expires-in", "1d")
    listed = site.herder("jointoken", "list").stdout
    (line,) = [row for row in listed.splitlines() if row.startswith("for-a-day")]
    assert line.split()[1] == "valid" and line.split()[2].endswith("Z")
    bad = site.herder("jointoken", "create", "never-made", "--expires-in", "soon", check=False)
    assert bad.returncode != 0 and "--expires-in 'soon'" in bad.stderr
