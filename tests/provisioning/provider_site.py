"""A site for end-to-end tests of provisioning: the clusters' site (a real ``herder serve`` and the
emulator, no machine registered) with infra providers registered through ``herder infraprovider create``
and run as separate processes (``herder emu provider``), each ended by its PID, even when a test fails."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.api.server import HERDER
from tests.clusters.site import Site, running_site

BASH_PROVIDER = Path(__file__).parents[2] / "examples" / "providers" / "bash" / "provider.sh"
"""The example provider in bash."""


@dataclass
class ProviderProcess:
    """One provider process: ``args`` run with its output in ``log``."""

    args: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> ProviderProcess:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.args, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **self.env}
            )
        return self

    def kill(self) -> None:
        """SIGKILL: the provider dies in the middle of whatever it does."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


def register(site: Site, provider_id: str, *args: str, by: Path | None = None) -> Path:
    """``herder infraprovider create ID -o FILE`` as an Admin (or with the kubeconfig ``by``: a hidden
    provider is Support's to create): the provider's kubeconfig."""
    kubeconfig = site.workdir / f"{provider_id}.kubeconfig"
    command = ("herder", "infraprovider", "create", provider_id, "-o", str(kubeconfig), *args)
    created = site.run(*command) if by is None else site.server.run(*command, kubeconfig=by)
    assert created.stdout.strip().startswith("hdr_"), created.stdout + created.stderr  # the token, shown once
    return kubeconfig


def emulator_provider(site: Site, provider_id: str, kubeconfig: Path) -> ProviderProcess:
    """``herder emu provider`` for ``provider_id`` on the site's emulator, with fast heartbeats and resyncs;
    its kubeconfig comes through ``$KUBECONFIG``, as a kubectl user gives it."""
    args = [
        HERDER,
        "emu",
        "provider",
        "--id",
        provider_id,
        "--emulator",
        site.emulator.control_url,
        "--heartbeat",
        "1",
        "--resync",
        "1",
    ]
    env = {"KUBECONFIG": str(kubeconfig), "HERDER_KUBECONFIG": ""}
    return ProviderProcess(args, site.workdir / f"{provider_id}-provider.log", env=env)


@contextmanager
def provisioning_site(
    workdir: Path,
    *serve_args: str,
    emulator_args: tuple[str, ...] = (),
    provider_id: str = "emu",
) -> Iterator[tuple[Site, ProviderProcess]]:
    """A site with the emulator's provider registered as ``provider_id`` and running (and connected)."""
    with running_site(workdir, 0, *serve_args, register=False, emulator_args=emulator_args) as site:
        provider = start_provider(site, provider_id)
        try:
            yield site, provider
        finally:
            provider.stop()


def start_provider(
    site: Site, provider_id: str, *register_args: str, by: Path | None = None
) -> ProviderProcess:
    """Register the emulator's provider as ``provider_id`` (``herder infraprovider create`` with
    ``register_args``, by ``by``) and run it until it is Ready (the caller stops it)."""
    provider = emulator_provider(
        site, provider_id, register(site, provider_id, *register_args, by=by)
    ).start()

    def ready() -> bool:
        if by is None:
            shown = site.get("infraprovider", provider_id)
        else:
            got = site.server.run("kubectl", "get", "infraprovider", provider_id, "-o", "json", kubeconfig=by)
            shown = json.loads(got.stdout or "{}")
        return condition(shown, "Ready").get("status") == "True"

    try:
        site.until(ready, timeout=60, what=f"provider {provider_id} Ready")
    except BaseException:
        provider.stop()
        raise
    return provider


def emu(site: Site, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``herder emu …`` against the site's emulator, as an operator runs it."""
    result = subprocess.run(
        [HERDER, "emu", *args, "--url", site.emulator.control_url], capture_output=True, text=True, timeout=60
    )
    if check and result.returncode != 0:
        raise AssertionError(f"herder emu {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == kind), {})


def emulated(site: Site) -> dict[str, dict[str, Any]]:
    """The emulator's machines by UUID, as its control API shows them."""
    answer = httpx.get(site.emulator.control_url + "/machines", timeout=30)
    answer.raise_for_status()
    return {m["uuid"]: m for m in answer.json()}


def machine_class(name: str, provider_id: str, **provider_data: Any) -> dict[str, Any]:
    return {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "MachineClass",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"autoProvision": {"providerID": provider_id, "providerData": provider_data}},
    }


def request_set(name: str, provider_id: str, count: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "MachineRequestSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"providerID": provider_id, "machineCount": count, "talosVersion": "v1.13.9", **spec},
    }


def requests_of(site: Site, request_set_name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = site.get(
        "machinerequests", None, "-l", f"herder.dev/machine-request-set={request_set_name}"
    )["items"]
    return items
