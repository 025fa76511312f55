"""Providers as they fail, crash, overreach and disappear, end to end on the emulator: a failing step
keeps its error and attempt count across retries; a provider killed mid-provisioning finishes after a
restart without a second machine; providers see and touch only their own requests; a provider's config
is sealed and shown to Admins and itself alone; bad provider data and config are refused naming the
field; a provider gone for good holds nothing hostage; a provider runs inside the server too; the
example provider in bash (kubectl alone) hands a machine of its pool to a request and takes it back; and
a machine a provider reports on two requests goes to the first, the second refused visibly.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.api.conftest import make_account
from tests.api.server import HERDER
from tests.clusters.site import Site
from tests.provisioning.provider_site import (
    BASH_PROVIDER,
    ProviderProcess,
    condition,
    emu,
    emulated,
    provisioning_site,
    register,
    request_set,
    requests_of,
)

SECRET = "s3cret-api-key-5f1c"


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Site, ProviderProcess]]:
    # Machines take a while to boot, so that a provider can be killed while it waits for one.
    with provisioning_site(
        tmp_path_factory.mktemp("providers"),
        "--provider",
        "inside=emulator",
        emulator_args=("--timing", "boot=1.5"),
    ) as both:
        yield both


@pytest.fixture(scope="module")
def site(running: tuple[Site, ProviderProcess]) -> Site:
    return running[0]


def _request(site: Site, set_name: str) -> dict[str, Any]:
    found: dict[str, Any] = site.until(
        lambda: (r := requests_of(site, set_name)) and r[0], what=f"a request of {set_name}"
    )
    return found


def _status(site: Site, name: str) -> dict[str, Any]:
    shown = yaml.safe_load(site.run("kubectl", "get", "machinerequest", name, "-o", "yaml").stdout)
    return dict(shown.get("status") or {})


def _account(site: Site, name: str, role: str) -> Path:
    return site.server.kubeconfig_for(asyncio.run(make_account(site.server, name, role)), name)


def test_a_failing_step_keeps_its_error_and_attempts_across_retries(site: Site) -> None:
    emu(site, "cloud-fault", "create", "--times", "3")
    site.apply([request_set("flaky", "emu", 1)])
    name = _request(site, "flaky")["metadata"]["name"]
    seen: list[dict[str, Any]] = []

    def failing_again() -> bool:
        status = _status(site, name)
        if status.get("lastError"):
            seen.append(status)
        return int(status.get("attempts") or 0) >= 2

    site.until(failing_again, timeout=30, every=0.2, what="two failed attempts")
    second = seen[-1]
    assert second["stage"] == "Provisioning" and second["step"] == "create" and second["stepNumber"] == 1
    assert "injected fault" in second["lastError"]["message"] and second["lastError"]["time"]
    assert {s["attempts"] for s in seen} >= {2}
    # The third failure, then success: the error stays until the attempt that works.
    site.until(
        lambda: _status(site, name).get("stage") == "Provisioned", timeout=60, what="provisioned at last"
    )
    done = _status(site, name)
    assert "lastError" not in done and done["attempts"] == 0 and done["machine"]["uuid"] in emulated(site)
    events = site.run("kubectl", "get", "events", "--field-selector", f"involvedObject.name={name}").stdout
    assert "ProvisioningFailed" in events and "attempt 3" in events
    site.run("kubectl", "delete", "machinerequestset", "flaky")
    site.until(lambda: not requests_of(site, "flaky"), timeout=60, what="the request destroyed")


def test_a_provider_killed_mid_provisioning_finishes_after_a_restart_without_a_second_machine(
    running: tuple[Site, ProviderProcess],
) -> None:
    site, provider = running
    before = set(emulated(site))
    site.apply([request_set("crashy", "emu", 1)])
    name = _request(site, "crashy")["metadata"]["name"]

    def booting() -> bool:
        # Made, and not booted yet: the provider cannot have reported it (its boot step waits for that).
        return any(m["stage"] == "BOOTING" for u, m in emulated(site).items() if u not in before)

    site.until(booting, timeout=30, every=0.05, what="its machine booting")
    provider.kill()
    made = set(emulated(site)) - before
    assert len(made) == 1 and _status(site, name).get("stage") != "Provisioned"
    provider.start()
    site.until(lambda: _status(site, name).get("stage") == "Provisioned", timeout=60, what="provisioned")
    assert set(emulated(site)) - before == made
    assert _status(site, name)["machine"]["uuid"] in made
    site.run("kubectl", "delete", "machinerequestset", "crashy")
    site.until(lambda: set(emulated(site)) == before, timeout=60, what="the machine destroyed")


def test_providers_see_and_touch_only_their_own_requests(site: Site) -> None:
    other = register(site, "other")
    site.apply([request_set("mine", "emu", 1), request_set("theirs", "other", 1)])
    mine, theirs = _request(site, "mine")["metadata"]["name"], _request(site, "theirs")["metadata"]["name"]
    emu_kubeconfig = site.workdir / "emu.kubeconfig"

    def as_(kubeconfig: Path, *args: str) -> Any:
        return site.server.run("kubectl", *args, kubeconfig=kubeconfig)

    hidden = as_(emu_kubeconfig, "get", "machinerequest", theirs)
    assert hidden.returncode != 0 and "NotFound" in hidden.stderr
    listed = json.loads(as_(emu_kubeconfig, "get", "machinerequests", "-o", "json").stdout)["items"]
    assert {r["spec"]["providerID"] for r in listed} == {"emu"}
    seen_by_other = {
        r["metadata"]["name"] for r in json.loads(as_(other, "get", "mr", "-o", "json").stdout)["items"]
    }
    assert theirs in seen_by_other and mine not in seen_by_other
    stolen = as_(
        emu_kubeconfig,
        "patch",
        "mr",
        theirs,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status": {"stage": "Failed"}}',
    )
    assert stolen.returncode != 0
    # Its own request's spec is not its to change, nor anyone else's objects.
    respec = as_(
        emu_kubeconfig, "patch", "mr", mine, "--type=merge", "-p", '{"metadata": {"labels": {"x": "y"}}}'
    )
    assert respec.returncode != 0 and "may change only metadata.finalizers" in respec.stderr
    assert as_(emu_kubeconfig, "get", "clusters").returncode != 0
    # Its join config is its own: herder's address for its machines.
    join = json.loads(as_(emu_kubeconfig, "get", "joinconfig", "emu", "-o", "json").stdout)
    assert join["spec"]["endpoint"] == site.server.url and join["spec"]["token"]
    assert as_(emu_kubeconfig, "get", "joinconfig", "other").returncode != 0
    # Users see requests and their status, but nobody writes it but the provider, Admins included.
    reader = _account(site, "mr-reader", "Reader")
    # The provider writes the request's first status when it takes the request up, which may be now.
    site.until(
        lambda: (
            json.loads(as_(reader, "get", "mr", mine, "-o", "json").stdout).get("status", {}).get("stage")
        ),
        what=f"{mine}'s status, as a Reader reads it",
    )
    for who in (reader, site.server.kubeconfig):
        refused = as_(
            who,
            "patch",
            "mr",
            mine,
            "--subresource=status",
            "--type=merge",
            "-p",
            '{"status": {"stage": "Failed"}}',
        )
        assert refused.returncode != 0 and "Forbidden" in refused.stderr, refused.stderr
    assert as_(reader, "get", "joinconfig", "emu").returncode != 0
    # A request's spec never changes once made (and one of a set is its controller's to change).
    owned = site.run("kubectl", "label", "mr", mine, "x=y", check=False)
    assert owned.returncode != 0 and "managed by controller MachineRequestSet" in owned.stderr
    site.apply(
        [
            {
                "apiVersion": "herder.dev/v1alpha1",
                "kind": "MachineRequest",
                "metadata": {"name": "by-hand", "namespace": "default"},
                "spec": {"providerID": "other", "talosVersion": "v1.13.9"},
            }
        ]
    )
    respec = site.run(
        "kubectl",
        "patch",
        "mr",
        "by-hand",
        "--type=merge",
        "-p",
        '{"spec": {"kernelArgs": ["x"]}}',
        check=False,
    )
    assert respec.returncode != 0 and "spec: a machine request's spec cannot be changed" in respec.stderr
    site.run("kubectl", "label", "mr", "by-hand", "x=y")  # its metadata is its owner's to change
    site.run("kubectl", "delete", "mr", "by-hand")
    site.run("kubectl", "delete", "machinerequestset", "mine", "theirs")


def test_a_provider_config_is_sealed_and_shown_to_admins_and_its_provider_only(site: Site) -> None:
    config = json.dumps({"spec": {"config": {"apiKey": SECRET, "region": "eu-1"}}})
    site.run("kubectl", "patch", "infraprovider", "other", "--type=merge", "-p", config)
    reader = _account(site, "config-reader", "Reader")
    shown = json.loads(
        site.server.run("kubectl", "get", "infraprovider", "other", "-o", "json", kubeconfig=reader).stdout
    )
    assert "config" not in shown["spec"] and SECRET not in json.dumps(shown)
    listed = site.server.run("kubectl", "get", "infraproviders", "-o", "json", kubeconfig=reader).stdout
    assert SECRET not in listed
    assert site.get("infraprovider", "other")["spec"]["config"]["apiKey"] == SECRET  # an Admin's view
    own = site.server.run(
        "kubectl", "get", "infraprovider", "other", "-o", "json", kubeconfig=site.workdir / "other.kubeconfig"
    )
    assert json.loads(own.stdout)["spec"]["config"]["apiKey"] == SECRET
    foreign = site.server.run(
        "kubectl", "get", "infraprovider", "other", kubeconfig=site.workdir / "emu.kubeconfig"
    )
    assert foreign.returncode != 0
    # Sealed at rest: the store's files never hold it in the clear.
    for path in (site.server.data_dir).glob("herder.db*"):
        assert SECRET.encode() not in path.read_bytes(), path


def test_bad_provider_data_and_config_are_refused_naming_the_field(site: Site) -> None:
    bad = site.workdir / "bad-set.yaml"
    bad.write_text(yaml.safe_dump(request_set("bad", "emu", 1, providerData={"cpus": "many"})))
    refused = site.run("kubectl", "apply", "-f", str(bad), check=False)
    assert refused.returncode != 0 and "spec.providerData.cpus" in refused.stderr
    bad.write_text(yaml.safe_dump(request_set("bad", "emu", 1, talosVersion="v0.1.0")))
    refused = site.run("kubectl", "apply", "-f", str(bad), check=False)
    assert refused.returncode != 0 and "spec.talosVersion" in refused.stderr
    bad.write_text(yaml.safe_dump(request_set("bad", "nobody", 1)))
    refused = site.run("kubectl", "apply", "-f", str(bad), check=False)
    assert "spec.providerID" in refused.stderr and "does not exist" in refused.stderr
    # The emulator's provider publishes the schema of its config: a wrong one is refused, its value unquoted.
    refused = site.run(
        "kubectl",
        "patch",
        "infraprovider",
        "emu",
        "--type=merge",
        "-p",
        '{"spec": {"config": {"emulator": 12345}}}',
        check=False,
    )
    assert (
        refused.returncode != 0 and "spec.config.emulator" in refused.stderr and "12345" not in refused.stderr
    )


def test_a_provider_gone_for_good_holds_nothing_hostage(site: Site) -> None:
    kubeconfig = register(site, "doomed")
    config = site.workdir / "doomed.yaml"
    config.write_text(yaml.safe_dump({"emulator": site.emulator.control_url}))
    provider = ProviderProcess(
        [
            HERDER,
            "infraprovider",
            "run",
            "doomed",
            "--kubeconfig",
            str(kubeconfig),
            "--type",
            "emulator",
            "--config",
            str(config),
            "--heartbeat",
            "1",
        ],
        site.workdir / "doomed.log",
    ).start()
    try:
        site.apply([request_set("doomed", "doomed", 2)])
        site.until(
            lambda: [
                r
                for r in requests_of(site, "doomed")
                if (r.get("status") or {}).get("stage") == "Provisioned"
            ][1:],
            timeout=60,
            what="two provisioned requests",
        )
    finally:
        provider.kill()
    site.until(
        lambda: condition(site.get("infraprovider", "doomed"), "Connected").get("status") == "False",
        timeout=30,
        what="the provider seen gone",
    )
    first, second = sorted(r["metadata"]["name"] for r in requests_of(site, "doomed"))
    site.run("kubectl", "delete", "machinerequestset", "doomed")
    # herder lets the machines go; the provider's finalizer is all that holds them.
    site.until(
        lambda: all(
            r["metadata"]["finalizers"] == ["herder.dev/infra-provider"] for r in requests_of(site, "doomed")
        ),
        timeout=30,
        what="only the provider's finalizer left",
    )
    assert not site.get("machines", None, "-l", "herder.dev/infra-provider-id=doomed")["items"]
    unforced = site.run("herder", "machinerequest", "release", first, check=False)
    assert unforced.returncode == 1 and "--force" in unforced.stderr
    operator = _account(site, "mr-operator", "Operator")
    denied = site.server.run("herder", "machinerequest", "release", first, "--force", kubeconfig=operator)
    assert denied.returncode == 1 and "Forbidden" in denied.stderr
    site.run("herder", "machinerequest", "release", first, "--force")
    site.until(lambda: first not in {r["metadata"]["name"] for r in requests_of(site, "doomed")}, timeout=30)
    audit = json.loads(site.run("kubectl", "get", "auditevents", "-o", "json").stdout)["items"]
    assert any(
        e["spec"]["subresource"] == "release" and e["spec"]["name"] == first and e["spec"]["code"] == 201
        for e in audit
    )
    # Deleting the provider lets the rest go.
    site.run("kubectl", "delete", "infraprovider", "doomed", "--timeout=60s")
    site.until(lambda: not requests_of(site, "doomed"), timeout=30, what=f"{second} let go")
    site.until(
        lambda: "infraprovider-doomed" not in site.run("kubectl", "get", "serviceaccounts").stdout, timeout=30
    )


def test_a_provider_runs_inside_the_server_as_its_own_account(site: Site) -> None:
    config = site.workdir / "inside.yaml"
    config.write_text(yaml.safe_dump({"emulator": site.emulator.control_url}))
    register(site, "inside", "--config", str(config))
    site.until(
        lambda: condition(site.get("infraprovider", "inside"), "Ready").get("status") == "True",
        timeout=60,
        what="the provider inside the server Ready",
    )
    account = site.get("serviceaccount", "infraprovider-inside")
    assert account["spec"] == {
        "role": "InfraProvider",
        "providerId": "inside",
        "description": "infra provider inside",
    }
    site.apply([request_set("inside", "inside", 1)])
    site.until(
        lambda: [
            r for r in requests_of(site, "inside") if (r.get("status") or {}).get("stage") == "Provisioned"
        ],
        timeout=60,
        what="a machine from the provider inside",
    )
    site.run("kubectl", "delete", "machinerequestset", "inside")
    site.until(lambda: not requests_of(site, "inside"), timeout=60, what="the request gone")


def test_a_hidden_provider_is_invisible_below_support(site: Site) -> None:
    support = _account(site, "platform", "Support")
    made = site.server.run(
        "herder", "infraprovider", "create", "herder-managed", "--hidden", kubeconfig=support
    )
    assert made.returncode == 0 and made.stdout.startswith("hdr_"), made.stderr
    for who in (site.server.kubeconfig, _account(site, "hidden-reader", "Reader")):
        shown = site.server.run("kubectl", "get", "infraprovider", "herder-managed", kubeconfig=who)
        assert shown.returncode != 0 and "NotFound" in shown.stderr
        assert (
            "herder-managed" not in site.server.run("kubectl", "get", "infraproviders", kubeconfig=who).stdout
        )
    # Below Support it does not exist for requests either (so nothing tells that it does).
    hidden_set = site.workdir / "hidden-set.yaml"
    hidden_set.write_text(yaml.safe_dump(request_set("uses-hidden", "herder-managed", 0)))
    refused = site.run("kubectl", "apply", "-f", str(hidden_set), check=False)
    assert refused.returncode != 0 and "infra provider 'herder-managed' does not exist" in refused.stderr
    site.server.run("kubectl", "apply", "-f", str(hidden_set), kubeconfig=support)
    assert site.server.run("kubectl", "get", "mrs", "uses-hidden", kubeconfig=support).returncode == 0
    site.server.run("kubectl", "delete", "mrs", "uses-hidden", kubeconfig=support)
    # Only herder- ids are hidden, and only Support makes them.
    named = site.run("herder", "infraprovider", "create", "plain", "--hidden", check=False)
    assert named.returncode == 1 and "must begin with 'herder-'" in named.stderr
    reserved = site.run("herder", "infraprovider", "create", "herder-mine", "--hidden", check=False)
    assert reserved.returncode == 1 and "reserved" in reserved.stderr


def test_the_bash_provider_provisions_a_machine_and_takes_it_back(site: Site) -> None:
    kubeconfig = register(site, "bash")
    # A machine of the pool: booted in the emulator, not registered with herder.
    (machine,) = httpx.post(site.emulator.control_url + "/machines", json={"count": 1}, timeout=30).json()
    pool = site.workdir / "pool.txt"
    pool.write_text(f"{machine['uuid']} {machine['endpoint']}\n")
    env = {"KUBECONFIG": str(kubeconfig), "PROVIDER_ID": "bash", "POOL": str(pool)}
    provider = ProviderProcess(["bash", str(BASH_PROVIDER)], site.workdir / "bash.log", env=env).start()
    try:
        site.until(
            lambda: condition(site.get("infraprovider", "bash"), "Ready").get("status") == "True",
            timeout=30,
            what="the bash provider Ready",
        )
        site.apply(
            [
                {
                    "apiVersion": "herder.dev/v1alpha1",
                    "kind": "MachineRequest",
                    "metadata": {"name": "from-bash", "namespace": "default"},
                    "spec": {
                        "providerID": "bash",
                        "talosVersion": "v1.13.9",
                        "machineLabels": {"pool": "bash"},
                    },
                }
            ]
        )
        site.until(
            lambda: (
                (site.get("machinerequest", "from-bash").get("status") or {}).get("stage") == "Provisioned"
            ),
            timeout=30,
            what="provisioned by bash",
        )
        request = site.get("machinerequest", "from-bash")
        assert set(request["metadata"]["finalizers"]) == {
            "herder.dev/infra-provider",
            "herder.dev/machine-release",
        }
        joined = site.until(
            lambda: (
                (m := site.get("machines")["items"]) and (m[0].get("status") or {}).get("connected") and m[0]
            ),
            timeout=30,
            what="herder connected to the pool machine",
        )
        assert joined["metadata"]["name"] == machine["uuid"]
        assert joined["metadata"]["labels"]["herder.dev/machine-request"] == "from-bash"
        assert joined["metadata"]["labels"]["pool"] == "bash"
        assert joined["status"]["stage"] == "Maintenance"
        site.run("kubectl", "delete", "machinerequest", "from-bash", "--timeout=60s")
        assert site.get("machines", None, "-l", "pool=bash")["items"] == []
        assert (site.workdir / "pool.txt.taken").read_text() == ""
    finally:
        provider.stop()


def test_a_machine_reported_on_two_requests_is_refused_to_the_second(site: Site) -> None:
    kubeconfig = register(site, "twice")
    (machine,) = httpx.post(site.emulator.control_url + "/machines", json={"count": 1}, timeout=30).json()
    site.apply([request_set("twice", "twice", 2)])
    site.until(lambda: len(requests_of(site, "twice")) == 2, what="two requests")
    first, second = sorted(r["metadata"]["name"] for r in requests_of(site, "twice"))
    # A provider's mistake, made through the API with its own credentials: one machine, two requests.
    reported = {"stage": "Provisioned", "machine": {"uuid": machine["uuid"], "address": machine["endpoint"]}}
    for name in (first, second):
        patch = json.dumps({"status": reported})
        written = site.server.run(
            "kubectl",
            "patch",
            "mr",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            patch,
            kubeconfig=kubeconfig,
        )
        assert written.returncode == 0, written.stderr
        if name == first:
            site.until(
                lambda: site.get("machines", None, "-l", f"herder.dev/machine-request={first}")["items"],
                what=f"the machine of {first}",
            )
    claimed = site.until(
        lambda: condition(c := site.get("machinerequest", second), "Conflict").get("status") == "True" and c,
        what=f"{second} refused",
    )
    assert condition(claimed, "Conflict")["reason"] == "MachineClaimed"
    assert f"request {first}" in condition(claimed, "Conflict")["message"]
    assert condition(site.get("machinerequest", first), "Conflict") == {}
    events = site.get("events", None, "--field-selector", f"involvedObject.name={second}")["items"]
    assert any(
        e["type"] == "Warning" and e["reason"] == "MachineClaimed" and first in e["message"] for e in events
    ), events
    # The provider shows it, and the set counts one machine.
    shown = site.until(
        lambda: condition(p := site.get("infraprovider", "twice"), "Conflict").get("status") == "True" and p,
        what="the provider's Conflict",
    )
    assert f"default/{second}" in condition(shown, "Conflict")["message"]
    described = site.run("kubectl", "describe", "infraprovider", "twice").stdout
    assert "MachineClaimed" in described, described
    counted = site.until(
        lambda: (s := site.get("machinerequestset", "twice")).get("status", {}).get("provisioned") == 1 and s,
        what="one of the two requests counted provisioned",
    )
    assert counted["status"]["requests"] == 2
    ready = condition(counted, "Ready")
    assert ready["status"] == "False" and f"{second}: Provisioned: machine" in ready["message"], ready
    # The set goes: herder releases the one machine, once; the requests wait for their provider (they
    # were made with its finalizer), and go with it.
    site.run("kubectl", "delete", "machinerequestset", "twice", "--wait=false")
    site.until(
        lambda: all(
            r["metadata"]["finalizers"] == ["herder.dev/infra-provider"] for r in requests_of(site, "twice")
        ),
        what="herder's finalizer gone",
    )
    assert not site.get("machines", None, "-l", "herder.dev/infra-provider-id=twice")["items"]
    site.run("kubectl", "delete", "infraprovider", "twice", "--timeout=60s")
    site.until(lambda: not requests_of(site, "twice"), what="the requests gone")
