"""The Redfish provider end to end on the emulator's BMCs, as an operator runs it: ``herder emu run --machines
3 --bmc`` makes bare metal (powered off, no OS); the provider (``herder infraprovider run --type redfish``),
configured with their BMCs from ``herder emu machines -o json``, makes a Ready cluster of one control plane
and two workers from an auto-provisioning MachineClass, each machine booted once from the Image Factory ISO
of the cluster's schematic over virtual media, even though the provider is killed (-9) while the machines
boot; shrinking the workers powers a machine off and frees its BMC; a wrong BMC password shows on the
request as an error kept across retries, without the password, until the config is fixed; power goes
through the BMC (a machine powered on again boots its disk); a request beyond the pool waits for a BMC.

The tests of this module run in order on one site, each starting from where the previous one left off.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from herder.resources.schematic import Customization, Schematic, SystemExtensions
from tests.api.server import HERDER
from tests.clusters.site import Site, running_site
from tests.provisioning.provider_site import (
    ProviderProcess,
    condition,
    emulated,
    machine_class,
    register,
    requests_of,
)

USER, PASSWORD = "herder", "bmc-pass-2b7d91"
EXTENSIONS = ["siderolabs/iscsi-tools"]
SCHEMATIC = Schematic(
    customization=Customization(systemExtensions=SystemExtensions(officialExtensions=EXTENSIONS))
).id()
WORKERS = "metal-workers"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    # Machines take a while to boot, so that the provider can be killed while they do.
    emulator_args = ("--bmc", "--bmc-user", USER, "--bmc-password", PASSWORD, "--timing", "boot=1.5")
    with running_site(tmp_path_factory.mktemp("metal"), 3, register=False, emulator_args=emulator_args) as s:
        yield s


def _bmcs(site: Site, password: str = PASSWORD) -> list[dict[str, Any]]:
    """The provider's pool, from ``herder emu machines -o json`` (each BMC's address, and the machine's)."""
    shown = subprocess.run(
        [HERDER, "emu", "machines", "-o", "json", "--url", site.emulator.control_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    machines = json.loads(shown.stdout)
    ca = site.emulator.data_dir / "bmc" / "ca.pem"
    return [
        {
            "name": f"bmc-{index}",
            "address": m["bmc"],
            "username": USER,
            "password": password,
            "caFile": str(ca),
            "machineAddress": m["endpoint"],
        }
        for index, m in enumerate(machines)
    ]


@pytest.fixture(scope="module")
def provider(site: Site) -> Iterator[ProviderProcess]:
    config = site.workdir / "metal.yaml"
    config.write_text(yaml.safe_dump({"bmcs": _bmcs(site)}))
    kubeconfig = register(site, "metal", "--config", str(config))
    args = [HERDER, "infraprovider", "run", "metal", "--type", "redfish", "--kubeconfig", str(kubeconfig)]
    process = ProviderProcess(
        [*args, "--heartbeat", "1", "--resync", "1"], site.workdir / "metal.log"
    ).start()
    try:
        site.until(
            lambda: condition(site.get("infraprovider", "metal"), "Ready").get("status") == "True",
            timeout=60,
            what="provider metal Ready",
        )
        yield process
    finally:
        process.stop()


def _sync_template(site: Site, workers: int) -> None:
    documents = [
        {
            "kind": "Cluster",
            "name": "metal",
            "kubernetes": {"version": "v1.33.0"},
            "talos": {"version": "v1.13.9"},
            "systemExtensions": EXTENSIONS,
        },
        {"kind": "ControlPlane", "machineClass": {"name": "metal", "size": 1}},
        {"kind": "Workers", "machineClass": {"name": "metal", "size": workers}},
    ]
    path = site.workdir / "metal-template.yaml"
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    site.run("herder", "cluster", "template", "sync", "-f", str(path), timeout=240)


def _status(site: Site, name: str) -> dict[str, Any]:
    return dict(site.get("machinerequest", name).get("status") or {})


def _provisioned(site: Site, set_name: str, count: int) -> list[dict[str, Any]]:
    def check() -> list[dict[str, Any]] | None:
        requests = requests_of(site, set_name)
        done = [r for r in requests if (r.get("status") or {}).get("stage") == "Provisioned"]
        return done if len(done) == count == len(requests) else None

    found: list[dict[str, Any]] = site.until(
        check, timeout=120, what=f"{count} provisioned requests of {set_name}"
    )
    return found


def test_a_ready_cluster_of_bare_metal_booted_once_from_virtual_media(
    site: Site, provider: ProviderProcess
) -> None:
    assert {m["power"] for m in emulated(site).values()} == {"off"}
    site.apply([machine_class("metal", "metal")])
    _sync_template(site, workers=2)

    # The provider dies while the machines boot from their ISOs, and starts again.
    site.until(
        lambda: any(
            _status(site, r["metadata"]["name"]).get("step") == "identify" for r in requests_of(site, WORKERS)
        ),
        timeout=90,
        every=0.1,
        what="a worker booting",
    )
    provider.kill()
    provider.start()

    site.wait("cluster", "metal", timeout=240)
    requests = _provisioned(site, WORKERS, 2)
    machines = emulated(site)
    iso = f"https://factory.talos.dev/image/{SCHEMATIC}/v1.13.9/metal-amd64.iso"
    for request in requests:
        uuid = request["status"]["machine"]["uuid"]
        assert request["status"]["machine"]["address"] == machines[uuid]["endpoint"]
        assert request["status"]["providerState"]["image"] == iso
    for machine in machines.values():
        # Every machine booted once (power-on self tests run), from the ISO in its virtual CD.
        assert machine["power"] == "on" and machine["boots"] == 1, machine
        assert machine["media"] == iso and machine["talos_version"] == "v1.13.9" and machine["installed"]
    held = {r["status"]["providerState"]["bmc"] for r in site.get("machinerequests")["items"]}
    assert len(held) == 3
    nodes = site.get("machines")["items"]
    assert {m["metadata"]["name"] for m in nodes} == set(machines)


def test_shrinking_powers_a_machine_off_and_frees_its_bmc(site: Site, provider: ProviderProcess) -> None:
    before = {r["status"]["machine"]["uuid"] for r in _provisioned(site, WORKERS, 2)}
    _sync_template(site, workers=1)
    (kept,) = _provisioned(site, WORKERS, 1)
    (freed,) = before - {kept["status"]["machine"]["uuid"]}
    site.until(lambda: emulated(site)[freed]["power"] == "off", timeout=90, what="the freed machine off")
    assert emulated(site)[freed]["media"] == ""
    site.wait("cluster", "metal", timeout=120)
    held = {
        (r.get("status") or {}).get("providerState", {}).get("bmc")
        for r in site.get("machinerequests")["items"]
    }
    assert len(held) == 2


def test_a_wrong_bmc_password_is_kept_on_the_request_without_the_password(
    site: Site, provider: ProviderProcess
) -> None:
    wrong = "wrong-" + PASSWORD
    patch = {"spec": {"config": {"bmcs": _bmcs(site, password=wrong)}}}
    site.run("kubectl", "patch", "infraprovider", "metal", "--type", "merge", "-p", json.dumps(patch))
    site.until(lambda: wrong in provider_config(site), timeout=10, what="the new config")
    _sync_template(site, workers=2)

    def failing_again() -> dict[str, Any] | None:
        for request in requests_of(site, WORKERS):
            status = request.get("status") or {}
            if status.get("stage") != "Provisioned" and int(status.get("attempts") or 0) >= 2:
                return dict(status)
        return None

    status = site.until(failing_again, timeout=60, what="the new worker failing twice")
    message = status["lastError"]["message"]
    assert "refused the credentials of 'herder'" in message and "401" in message, message
    assert message.startswith("BMC bmc-") and wrong not in message and PASSWORD not in message
    described = site.run(
        "kubectl", "describe", "machinerequests", "-l", f"herder.dev/machine-request-set={WORKERS}"
    )
    assert wrong not in described.stdout and "refused the credentials" in described.stdout

    fixed = {"spec": {"config": {"bmcs": _bmcs(site)}}}
    site.run("kubectl", "patch", "infraprovider", "metal", "--type", "merge", "-p", json.dumps(fixed))
    _provisioned(site, WORKERS, 2)
    site.wait("cluster", "metal", timeout=180)


def provider_config(site: Site) -> str:
    return json.dumps(site.get("infraprovider", "metal").get("spec", {}).get("config", {}))


def test_power_goes_through_the_bmc_and_a_machine_boots_its_disk_again(
    site: Site, provider: ProviderProcess
) -> None:
    request = _provisioned(site, WORKERS, 2)[0]
    uuid = request["status"]["machine"]["uuid"]
    boots = emulated(site)[uuid]["boots"]

    def power(**wanted: Any) -> None:
        patch = json.dumps({"spec": {"power": wanted}})
        site.run("kubectl", "patch", "machine", uuid, "--type", "merge", "-p", patch)

    def shown() -> dict[str, Any]:
        return dict((site.get("machine", uuid).get("status") or {}).get("power") or {})

    power(on=False)  # GracefulShutdown: Talos shuts down
    site.until(lambda: shown().get("on") is False, timeout=90, what="powered off in status")
    assert emulated(site)[uuid]["power"] == "off"
    power(on=True)
    site.until(lambda: shown().get("on") is True, timeout=60, what="powered on in status")
    # The one-time override was spent by the first boot: it boots the installed system, not the ISO.
    site.until(lambda: emulated(site)[uuid]["stage"] == "RUNNING", timeout=60, what="the disk booted")
    assert emulated(site)[uuid]["boots"] == boots + 1 and emulated(site)[uuid]["installed"]
    power(on=True, rebootRequestID="reboot-1")  # GracefulRestart
    site.until(lambda: shown().get("lastRebootID") == "reboot-1", timeout=60, what="the reboot done")
    site.until(lambda: emulated(site)[uuid]["boots"] == boots + 2, timeout=60, what="booted again")
    site.wait("cluster", "metal", timeout=180)


def test_a_request_beyond_the_pool_waits_for_a_free_bmc(site: Site, provider: ProviderProcess) -> None:
    _sync_template(site, workers=3)

    def waiting() -> dict[str, Any] | None:
        for request in requests_of(site, WORKERS):
            status = request.get("status") or {}
            if status.get("step") == "claim" and "in use" in str(status.get("message")):
                return dict(status)
        return None

    status = site.until(waiting, timeout=60, what="a request waiting for a BMC")
    assert status["stage"] == "Provisioning" and "lastError" not in status
    assert status["message"] == "all 3 BMCs of the pool are in use: waiting for one"
    _sync_template(site, workers=2)
    _provisioned(site, WORKERS, 2)
    site.wait("cluster", "metal", timeout=120)
