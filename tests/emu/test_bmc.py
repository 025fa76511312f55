"""Emulated BMCs (``herder emu run --bmc``) as a Redfish client and an operator see them: the machines start
powered off with no OS, each with a System (its UUID the machine's) and a Manager in one Redfish service,
whose addresses ``machines.json`` and ``herder emu machines -o json`` give with the power state; powered
on without media a machine boots nothing; powered on with an Image Factory ISO in its virtual CD and a
one-time boot override it boots that Talos version into maintenance mode (the override spent); power off,
graceful shutdown and restart work; only the account given answers, by basic auth or a session;
DMTF's Redfish protocol validator finds no FAIL; and a BMC keeps its media and boot override across a
restart of the emulator."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from herder.emu.control.process import EmulatorProcess
from herder.talos.machine import MachineAPIError, MachineClient
from herder.talos.machine import resources as res
from tests.api.server import HERDER, free_port

USER, PASSWORD = "root", "bmc-secret-4c1d"
SCHEMATIC = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
ISO = f"https://factory.talos.dev/image/{SCHEMATIC}/v1.12.4/metal-amd64.iso"


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    process = EmulatorProcess(
        data_dir=tmp_path_factory.mktemp("bmc"),
        machines=3,
        machine_cidr=f"127.{random.randint(64, 250)}.{random.randint(0, 255)}.0/24",
        machine_port=free_port(),
        extra_args=["--bmc", "--bmc-user", USER, "--bmc-password", PASSWORD],
    )
    process.start()
    try:
        asyncio.run(process.wait_ready())
        yield process
    finally:
        process.stop()


def _service(emulator: EmulatorProcess) -> str:
    return str(json.loads((emulator.data_dir / "emulator.json").read_text())["bmc"])


def _tls(emulator: EmulatorProcess) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(emulator.data_dir / "bmc" / "ca.pem"))


def _redfish(
    emulator: EmulatorProcess,
    method: str,
    path: str,
    body: Any = None,
    auth: Any = (USER, PASSWORD),
    **kw: Any,
) -> httpx.Response:
    return httpx.request(
        method, _service(emulator) + path, json=body, auth=auth, verify=_tls(emulator), timeout=30, **kw
    )


def _machines(emulator: EmulatorProcess) -> list[dict[str, Any]]:
    shown = subprocess.run(
        [HERDER, "emu", "machines", "-o", "json", "--url", emulator.control_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    machines: list[dict[str, Any]] = json.loads(shown.stdout)
    return machines


async def _until(emulator: EmulatorProcess, uuid: str, check: Any, timeout: float = 15) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        machine: dict[str, Any] = await emulator.control("GET", f"/machines/{uuid}")
        if check(machine):
            return machine
        assert asyncio.get_running_loop().time() < deadline, f"timed out; last: {machine}"
        await asyncio.sleep(0.05)


def test_machines_start_powered_off_with_no_os_each_with_its_bmc(emulator: EmulatorProcess) -> None:
    published = emulator.published()
    shown = {m["uuid"]: m for m in _machines(emulator)}
    assert len(published) == 3 and set(shown) == {m["uuid"] for m in published}
    for machine in published:
        assert machine["power"] == "off" and shown[machine["uuid"]]["power"] == "off"
        assert machine["bmc"] == f"{_service(emulator)}/redfish/v1/Systems/{machine['uuid']}"
        assert (
            shown[machine["uuid"]]["bmc"] == machine["bmc"] and shown[machine["uuid"]]["stage"] == "UNKNOWN"
        )
        system = _redfish(emulator, "GET", f"/redfish/v1/Systems/{machine['uuid']}").json()
        assert system["UUID"] == machine["uuid"] and system["PowerState"] == "Off"
        assert system["Boot"]["BootSourceOverrideEnabled"] == "Disabled"
    members = _redfish(emulator, "GET", "/redfish/v1/Systems").json()["Members"]
    assert len(members) == 3


async def test_powered_on_without_media_a_machine_boots_nothing(emulator: EmulatorProcess) -> None:
    machine = emulator.published()[0]
    reset = f"/redfish/v1/Systems/{machine['uuid']}/Actions/ComputerSystem.Reset"
    assert _redfish(emulator, "POST", reset, {"ResetType": "On"}).status_code == 204
    shown = await _until(emulator, machine["uuid"], lambda m: m["power"] == "on")
    assert shown["stage"] == "UNKNOWN" and "no bootable device" in shown["last_error"]
    with pytest.raises(MachineAPIError):
        async with MachineClient.insecure(
            machine["endpoint"], timeout=2, connect_timeout=2, retries=0
        ) as client:
            await client.version()
    assert _redfish(emulator, "POST", reset, {"ResetType": "ForceOff"}).status_code == 204
    await _until(emulator, machine["uuid"], lambda m: m["power"] == "off")
    assert next(m for m in emulator.published() if m["uuid"] == machine["uuid"])["power"] == "off"


async def test_the_iso_in_the_virtual_cd_boots_its_talos_into_maintenance_once(
    emulator: EmulatorProcess,
) -> None:
    machine = emulator.published()[1]
    uuid = machine["uuid"]
    system = f"/redfish/v1/Systems/{uuid}"
    cd = f"/redfish/v1/Managers/{uuid}/VirtualMedia/CD1"
    inserted = _redfish(emulator, "POST", f"{cd}/Actions/VirtualMedia.InsertMedia", {"Image": ISO})
    assert inserted.status_code == 204, inserted.text
    assert _redfish(emulator, "GET", cd).json()["Image"] == ISO
    etag = _redfish(emulator, "GET", system).headers["ETag"]
    boot = {"Boot": {"BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Once"}}
    stale = _redfish(emulator, "PATCH", system, boot, headers={"If-Match": 'W/"stale"'})
    assert stale.status_code == 412
    assert _redfish(emulator, "PATCH", system, boot, headers={"If-Match": etag}).status_code == 204
    assert (
        _redfish(emulator, "POST", f"{system}/Actions/ComputerSystem.Reset", {"ResetType": "On"}).status_code
        == 204
    )
    shown = await _until(emulator, uuid, lambda m: m["stage"] == "MAINTENANCE")
    assert shown["talos_version"] == "v1.12.4" and shown["boots"] == 1 and shown["media"] == ISO
    async with MachineClient.insecure(machine["endpoint"], timeout=5, retries=0) as client:
        assert (await client.version()).tag == "v1.12.4"
        assert (await client.system_information()).uuid.lower() == uuid
        # The ISO's schematic, as an Image Factory image reports it: its "schematic" extension's version.
        (extension,) = await client.list_resources(res.RUNTIME, res.EXTENSION_STATUS)
        spec = extension.typed(res.ExtensionStatusSpec)
        assert (spec.metadata.name, spec.metadata.version) == ("schematic", SCHEMATIC)
    # The override was spent by that boot: the next cold boot follows the boot order.
    assert _redfish(emulator, "GET", system).json()["Boot"]["BootSourceOverrideEnabled"] == "Disabled"

    # A graceful shutdown is the system's own (Talos shuts down), and the BMC sees it off.
    reset = f"{system}/Actions/ComputerSystem.Reset"
    assert _redfish(emulator, "POST", reset, {"ResetType": "GracefulShutdown"}).status_code == 204
    await _until(emulator, uuid, lambda m: m["power"] == "off")
    assert _redfish(emulator, "GET", system).json()["PowerState"] == "Off"
    # A graceful restart: off, then on again, booting the CD from the boot order (nothing is installed).
    assert _redfish(emulator, "POST", reset, {"ResetType": "On"}).status_code == 204
    await _until(emulator, uuid, lambda m: m["stage"] == "MAINTENANCE" and m["boots"] == 2)
    assert _redfish(emulator, "POST", reset, {"ResetType": "GracefulRestart"}).status_code == 204
    await _until(emulator, uuid, lambda m: m["stage"] == "MAINTENANCE" and m["boots"] == 3)
    assert _redfish(emulator, "POST", reset, {"ResetType": "ForceRestart"}).status_code == 204
    await _until(emulator, uuid, lambda m: m["stage"] == "MAINTENANCE" and m["boots"] == 4)

    ejected = _redfish(emulator, "POST", f"{cd}/Actions/VirtualMedia.EjectMedia", {})
    assert ejected.status_code == 204 and _redfish(emulator, "GET", cd).json()["Inserted"] is False
    assert _redfish(emulator, "POST", reset, {"ResetType": "ForceOff"}).status_code == 204


def test_bad_requests_get_redfish_errors(emulator: EmulatorProcess) -> None:
    uuid = emulator.published()[2]["uuid"]
    system = f"/redfish/v1/Systems/{uuid}"
    wrong = _redfish(emulator, "PATCH", system, {"Boot": {"BootSourceOverrideTarget": "Floppy"}})
    assert wrong.status_code == 400
    info = wrong.json()["error"]["@Message.ExtendedInfo"][0]
    assert info["MessageId"].endswith("PropertyValueNotInList") and "Floppy" in info["Message"]
    assert (
        _redfish(emulator, "PATCH", system, {"PowerState": "On"})
        .json()["error"]["code"]
        .endswith("PropertyNotWritable")
    )
    reset = _redfish(emulator, "POST", f"{system}/Actions/ComputerSystem.Reset", {"ResetType": "Nmi"})
    assert reset.status_code == 400 and "ResetType" in reset.json()["error"]["message"]
    missing = _redfish(emulator, "GET", "/redfish/v1/Systems/not-a-machine")
    assert missing.status_code == 404
    assert _redfish(emulator, "DELETE", system).headers["Allow"] == "GET, HEAD, PATCH"


def test_only_the_account_given_answers_by_basic_auth_or_a_session(emulator: EmulatorProcess) -> None:
    systems = "/redfish/v1/Systems"
    anonymous = _redfish(emulator, "GET", systems, auth=None)
    assert anonymous.status_code == 401 and anonymous.headers["WWW-Authenticate"].startswith("Basic")
    assert _redfish(emulator, "GET", systems, auth=(USER, "not-" + PASSWORD)).status_code == 401
    assert (
        _redfish(emulator, "GET", "/redfish/v1/", auth=None).status_code == 200
    )  # the service root is public
    refused = _redfish(
        emulator,
        "POST",
        "/redfish/v1/SessionService/Sessions",
        {"UserName": USER, "Password": "x"},
        auth=None,
    )
    assert refused.status_code == 401 and PASSWORD not in refused.text
    login = _redfish(
        emulator,
        "POST",
        "/redfish/v1/SessionService/Sessions",
        {"UserName": USER, "Password": PASSWORD},
        auth=None,
    )
    assert login.status_code == 201
    token, location = login.headers["X-Auth-Token"], login.headers["Location"]
    assert _redfish(emulator, "GET", systems, auth=None, headers={"X-Auth-Token": token}).status_code == 200
    assert (
        _redfish(emulator, "DELETE", location, auth=None, headers={"X-Auth-Token": token}).status_code == 204
    )
    assert _redfish(emulator, "GET", systems, auth=None, headers={"X-Auth-Token": token}).status_code == 401


def test_dmtfs_protocol_validator_finds_no_failure(emulator: EmulatorProcess, tmp_path: Path) -> None:
    # requests prefers REQUESTS_CA_BUNDLE to the session's CA bundle the validator sets: drop it.
    environment = {k: v for k, v in os.environ.items() if k not in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")}
    validator = Path(sys.executable).with_name("rf_protocol_validator")
    result = subprocess.run(
        [
            str(validator),
            "--rhost",
            _service(emulator),
            "--user",
            USER,
            "--password",
            PASSWORD,
            "--ca-bundle",
            str(emulator.data_dir / "bmc" / "ca.pem"),
            "--report-dir",
            str(tmp_path),
            "--report-type",
            "tsv",
            "--avoid-http-redirect",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=environment,
        cwd=tmp_path,
    )
    summary = next((line for line in result.stdout.splitlines() if line.startswith("Summary")), result.stdout)
    (report,) = tmp_path.glob("*.tsv")
    failed = [line for line in report.read_text().splitlines() if "\tFAIL\t" in line]
    assert result.returncode == 0 and not failed, f"{summary}\n" + "\n".join(failed)
    assert "FAIL: 0" in summary
    # What it could not test is what the emulator leaves out, as its documentation lists it.
    not_tested = {line.split("\t")[0] for line in report.read_text().splitlines() if "\tNOT_TESTED\t" in line}
    undocumented = sorted(not_tested - _documented_not_tested())
    assert not_tested and not undocumented, undocumented


def _documented_not_tested() -> set[str]:
    """The validator's assertions that docs/providers/redfish.md says it cannot test on the emulator."""
    text = (Path(__file__).parents[2] / "docs" / "providers" / "redfish.md").read_text()
    section = text.split("## What DMTF's protocol validator cannot test", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`([A-Z][A-Z0-9_]{4,})`", section))


async def test_a_bmc_keeps_its_media_and_override_across_a_restart_of_the_emulator(
    emulator: EmulatorProcess,
) -> None:
    uuid = emulator.published()[2]["uuid"]
    cd = f"/redfish/v1/Managers/{uuid}/VirtualMedia/CD1"
    assert (
        _redfish(emulator, "POST", f"{cd}/Actions/VirtualMedia.InsertMedia", {"Image": ISO}).status_code
        == 204
    )
    boot = {"Boot": {"BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Continuous"}}
    assert _redfish(emulator, "PATCH", f"/redfish/v1/Systems/{uuid}", boot).status_code == 204
    emulator.stop()
    emulator.start()
    await emulator.wait_ready()
    assert _redfish(emulator, "GET", cd).json()["Image"] == ISO
    system = _redfish(emulator, "GET", f"/redfish/v1/Systems/{uuid}").json()
    assert system["PowerState"] == "Off" and system["Boot"]["BootSourceOverrideEnabled"] == "Continuous"
    # A continuous override stays: each cold boot boots the CD.
    reset = f"/redfish/v1/Systems/{uuid}/Actions/ComputerSystem.Reset"
    assert _redfish(emulator, "POST", reset, {"ResetType": "On"}).status_code == 204
    await _until(emulator, uuid, lambda m: m["stage"] == "MAINTENANCE")
    assert (
        _redfish(emulator, "GET", f"/redfish/v1/Systems/{uuid}").json()["Boot"]["BootSourceOverrideEnabled"]
        == "Continuous"
    )


def test_bad_bmc_options_are_refused_naming_the_option(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [HERDER, "emu", "run", "--data-dir", str(tmp_path), "--listen", "127.0.0.1:0", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    refused = run("--bmc", "--bmc-listen", "nowhere")
    assert refused.returncode != 0 and "invalid --bmc-listen 'nowhere': expected HOST:PORT" in refused.stderr
    refused = run("--bmc-password", "x")
    assert refused.returncode != 0 and "go with --bmc" in refused.stderr
    refused = run("--bmc", "--bmc-password", "")
    assert refused.returncode != 0 and "must not be empty" in refused.stderr
