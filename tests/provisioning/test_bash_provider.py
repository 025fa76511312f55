"""The example provider of ``examples/providers/bash`` (under 100 lines of bash, kubectl alone) against a
running herder: it hands a machine of its pool to a MachineRequest, herder connects to it, and it takes
the machine back once the request is deleted and herder has released it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clusters.site import Site, running_site
from tests.provisioning.provider_site import ProviderProcess, condition, register

SCRIPT = Path(__file__).parents[2] / "examples" / "providers" / "bash" / "provider.sh"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with running_site(tmp_path_factory.mktemp("bash"), 1, register=False) as s:
        yield s


def test_the_example_is_short_and_uses_kubectl_alone() -> None:
    lines = SCRIPT.read_text().splitlines()
    assert len(lines) < 100
    code = " ".join(line.split("#")[0] for line in lines if not line.lstrip().startswith("#"))
    assert "kubectl" in code
    assert not re.search(r"\b(curl|wget|jq|python3?|herder)\s", code)


def test_the_bash_provider_provisions_a_machine_and_takes_it_back(site: Site) -> None:
    kubeconfig = register(site, "bash")
    (machine,) = site.machines
    pool = site.workdir / "pool.txt"
    pool.write_text(f"{machine['uuid']} {machine['endpoint']}\n")
    env = {"KUBECONFIG": str(kubeconfig), "PROVIDER_ID": "bash", "POOL": str(pool)}
    provider = ProviderProcess(["bash", str(SCRIPT)], site.workdir / "bash.log", env=env).start()
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
        assert site.get("machines")["items"] == []
        assert (site.workdir / "pool.txt.taken").read_text() == ""
    finally:
        provider.stop()
