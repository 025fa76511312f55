"""The example provider of ``examples/providers/python``, written from docs/providers.md alone with the
official ``kubernetes`` client, end to end against a running herder and the emulator as its cloud: it
provisions a set's machines, keeps a failed attempt's error and count until one succeeds, reports a machine
destroyed behind its back, destroys the machines a shrinking set lets go, and releases the rest when the set
goes; its heartbeats never drop herder's conditions."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clusters.site import Site, running_site
from tests.provisioning.provider_site import (
    ProviderProcess,
    condition,
    emu,
    emulated,
    register,
    request_set,
    requests_of,
)

PYTHON_PROVIDER = Path(__file__).parents[2] / "examples" / "providers" / "python" / "provider.py"


def test_the_example_uses_the_kubernetes_client_and_no_herder_code() -> None:
    tree = ast.parse(PYTHON_PROVIDER.read_text())
    imported = {
        (node.module or "").split(".")[0] if isinstance(node, ast.ImportFrom) else alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert "kubernetes" in imported and "herder" not in imported


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Site, ProviderProcess]]:
    with running_site(tmp_path_factory.mktemp("python-provider"), 0, register=False) as site:
        kubeconfig = register(site, "pycloud")
        env = {
            "KUBECONFIG": str(kubeconfig),
            "PROVIDER_ID": "pycloud",
            "CLOUD": site.emulator.control_url,
            "HEARTBEAT_SECONDS": "1",
            "RESYNC_SECONDS": "2",
        }
        provider = ProviderProcess(
            [sys.executable, str(PYTHON_PROVIDER)], site.workdir / "pycloud.log", env=env
        )
        provider.start()
        try:
            yield site, provider
        finally:
            provider.stop()


def _machines(site: Site) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = site.get("machines", None, "-l", "herder.dev/machine-request-set=py")[
        "items"
    ]
    return items


def _provisioned(site: Site, count: int) -> list[dict[str, Any]]:
    def check() -> list[dict[str, Any]] | None:
        requests = requests_of(site, "py")
        stages = [(r.get("status") or {}).get("stage") for r in requests]
        return requests if stages == ["Provisioned"] * count else None

    found: list[dict[str, Any]] = site.until(check, timeout=60, what=f"{count} requests provisioned")
    return found


def test_it_provisions_shrinks_and_releases_machines(site: tuple[Site, ProviderProcess]) -> None:
    herder, provider = site
    herder.until(
        lambda: condition(herder.get("infraprovider", "pycloud"), "Ready").get("status") == "True",
        timeout=60,
        what="the Python provider Ready",
    )
    log = provider.log

    # Provision: two machines made in the cloud, and herder connected to each.
    herder.apply([request_set("py", "pycloud", 2, providerData={"cpus": 2, "memoryMiB": 4096})])
    requests = _provisioned(herder, 2)
    for request in requests:
        assert set(request["metadata"]["finalizers"]) == {
            "herder.dev/infra-provider",
            "herder.dev/machine-release",
        }
        assert "lastError" not in request["status"] and request["status"]["attempts"] == 0
    uuids = {r["status"]["machine"]["uuid"] for r in requests}
    assert uuids <= set(emulated(herder))
    herder.until(
        lambda: (
            {m["metadata"]["name"] for m in _machines(herder) if (m.get("status") or {}).get("connected")}
            == uuids
        ),
        timeout=60,
        what="herder connected to both machines",
    )
    assert all(m["hardware"]["cpus"] == 2 for m in emulated(herder).values() if m["uuid"] in uuids)

    # Its heartbeats are merge patches of its own fields: herder's conditions stay on the InfraProvider.
    shown = herder.get("infraprovider", "pycloud")
    assert condition(shown, "Connected").get("status") == "True"
    assert shown["status"]["schema"]["properties"]["cpus"]["type"] == "integer"

    # Shrink: one request goes, and with it its machine, in herder and in the cloud.
    herder.run("kubectl", "patch", "mrs", "py", "--type=merge", "-p", '{"spec": {"machineCount": 1}}')
    herder.until(lambda: len(requests_of(herder, "py")) == 1, timeout=60, what="the set shrunk to one")
    herder.until(lambda: len(uuids & set(emulated(herder))) == 1, timeout=60, what="a machine destroyed")
    (kept,) = uuids & set(emulated(herder))
    herder.until(
        lambda: [m["metadata"]["name"] for m in _machines(herder)] == [kept], what="one Machine left"
    )

    # A failed attempt keeps its error and count until one succeeds, which clears them.
    emu(herder, "cloud-fault", "create", "--times", "1")
    herder.run("kubectl", "patch", "mrs", "py", "--type=merge", "-p", '{"spec": {"machineCount": 2}}')

    def failed_once() -> dict[str, Any] | None:
        for request in requests_of(herder, "py"):
            status = request.get("status") or {}
            if status.get("attempts") == 1 and status.get("lastError"):
                return status
        return None

    failing = herder.until(failed_once, timeout=60, what="a failed attempt on the status")
    assert failing["stage"] == "Provisioning" and "create" in failing["lastError"]["message"]
    retried = _provisioned(herder, 2)
    assert all("lastError" not in r["status"] and r["status"]["attempts"] == 0 for r in retried)

    # A machine destroyed behind herder's back: Failed, MachineGone, and the set makes a replacement.
    gone = next(r for r in retried if r["status"]["machine"]["uuid"] != kept)
    emu(herder, "fault", gone["status"]["machine"]["uuid"], "vanish")
    herder.until(
        lambda: gone["metadata"]["name"] not in {r["metadata"]["name"] for r in requests_of(herder, "py")},
        timeout=60,
        what="the request of the vanished machine replaced",
    )
    replaced = _provisioned(herder, 2)
    assert gone["metadata"]["name"] not in {r["metadata"]["name"] for r in replaced}

    # Release: the set goes, its requests with it, every machine destroyed; nothing is left.
    last = {r["status"]["machine"]["uuid"] for r in replaced}
    herder.run("kubectl", "delete", "mrs", "py", "--timeout=90s", timeout=120)
    herder.until(lambda: not requests_of(herder, "py"), timeout=60, what="every request gone")
    assert not last & set(emulated(herder))
    herder.until(lambda: not _machines(herder), timeout=60, what="every Machine gone")
    assert "Traceback" not in log.read_text()


def test_status_writes_keep_herders_conditions_as_the_page_says(site: tuple[Site, ProviderProcess]) -> None:
    """As docs/providers.md says: a merge patch of the provider's own fields leaves herder's conditions
    alone, and a PUT that would drop them is refused, naming the fields a provider may change."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    herder, _ = site
    api = client.CustomObjectsApi(config.new_client_from_config(str(herder.workdir / "pycloud.kubeconfig")))
    herder.until(
        lambda: condition(herder.get("infraprovider", "pycloud"), "Connected").get("status") == "True",
        what="the provider connected",
    )
    patched = api.patch_cluster_custom_object_status(
        "herder.dev", "v1alpha1", "infraproviders", "pycloud", {"status": {"version": "1.0.1"}}
    )
    assert patched["status"]["version"] == "1.0.1"
    assert {c["type"] for c in patched["status"]["conditions"]} >= {"Connected", "Ready"}
    current = api.get_cluster_custom_object("herder.dev", "v1alpha1", "infraproviders", "pycloud")
    del current["status"]["conditions"]
    with pytest.raises(ApiException) as refused:
        api.replace_cluster_custom_object_status(
            "herder.dev", "v1alpha1", "infraproviders", "pycloud", current
        )
    assert refused.value.status == 403 and "may change only" in str(refused.value.body)
