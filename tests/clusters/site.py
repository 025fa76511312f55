"""A site for end-to-end tests of clusters: a real ``herder serve`` with its load balancer range, the Talos
emulator as a separate process whose machines are registered with it, and the tools users drive them
with (the real kubectl and herder's CLI). Both processes are ended by their PIDs, even when a test fails.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from herder.emu.control.process import EmulatorProcess
from herder.resources import Resource
from tests.api.server import HERDER, KUBECTL, Server, free_port, random_cidr, running


def endpoint_range() -> str:
    """A range of ten ports on loopback for the server's cluster load balancers."""
    first = random.randrange(20000, 30000, 10)
    return f"127.0.0.1:{first}-{first + 9}"


@dataclass
class Site:
    server: Server
    emulator: EmulatorProcess
    workdir: Path
    endpoints: str

    @property
    def machines(self) -> list[dict[str, str]]:
        """uuid, endpoint and node of every emulated machine, in the emulator's order."""
        return self.emulator.published()

    def run(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``kubectl …`` or ``herder …`` against the server, as a user runs them."""
        program = {"kubectl": KUBECTL, "herder": HERDER}[args[0]]
        result = subprocess.run(
            [program, *args[1:], "--kubeconfig", str(self.server.kubeconfig)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout}{result.stderr}"
            )
        return result

    def apply(self, documents: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
        path = self.workdir / f"apply-{time.monotonic_ns()}.yaml"
        path.write_text(yaml.safe_dump_all(documents))
        return self.run("kubectl", "apply", "-f", str(path))

    def get(self, kind: str, name: str | None = None, *selectors: str) -> Any:
        args = ["kubectl", "get", kind, *([name] if name else []), *selectors, "-o", "json"]
        return json.loads(self.run(*args).stdout)

    def wait(self, kind: str, name: str, condition: str = "Ready", timeout: int = 90) -> None:
        """``kubectl wait``; on a timeout the failure shows the object and its cluster's machines."""
        args = ("kubectl", "wait", f"--for=condition={condition}", f"{kind}/{name}", f"--timeout={timeout}s")
        result = self.run(*args, timeout=timeout + 30, check=False)
        if result.returncode != 0:
            shown = self.run("kubectl", "get", kind, name, "-o", "yaml", check=False).stdout
            machines = self.run(
                "kubectl", "get", "clustermachines,machinesets", "-o", "wide", check=False
            ).stdout
            raise AssertionError(f"{' '.join(args)}: {result.stderr}\n{shown}\n{machines}")

    def until(self, check: Any, timeout: float = 60, every: float = 0.5, what: str = "") -> Any:
        """Poll ``check()`` until it returns something truthy; fail naming ``what`` on timeout."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = check()
            if last:
                return last
            time.sleep(every)
        raise AssertionError(f"timed out after {timeout}s waiting for {what or check}; last: {last!r}")

    def register(self, *uuids_or_all: str) -> None:
        """Register machines as an Admin does: ``herder machine add`` with their endpoints."""
        machines = [m for m in self.machines if not uuids_or_all or m["uuid"] in uuids_or_all]
        self.run("herder", "machine", "add", *(m["endpoint"] for m in machines))

    def connected(self) -> list[str]:
        """The UUIDs of the Machines herder is connected to."""
        return [
            m["metadata"]["name"]
            for m in self.get("machines")["items"]
            if (m.get("status") or {}).get("connected")
        ]

    def stage_of(self, uuid: str) -> str:
        return str((self.get("machine", uuid).get("status") or {}).get("stage", ""))


def cluster(name: str, talos: str = "v1.13.9", kubernetes: str = "1.33.0", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"talosVersion": talos, "kubernetesVersion": kubernetes, **spec},
    }


def machine_set(cluster_name: str, name: str, role: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "MachineSet",
        "metadata": {"name": name, "namespace": "default", "labels": {"herder.dev/cluster": cluster_name}},
        "spec": {"role": role, **spec},
    }


def machine_class(name: str, match_labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "MachineClass",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": match_labels}},
    }


@contextmanager
def running_site(
    workdir: Path,
    machines: int,
    *serve_args: str,
    register: bool = True,
    emulator_args: tuple[str, ...] = (),
    cluster_endpoints: bool = True,
    port: int | None = None,
) -> Iterator[Site]:
    """A server (on ``port``, default a free one) and an emulator of ``machines`` machines on a loopback
    network of their own; with
    ``register`` the emulator registers its machines with the server (``herder emu run --register``);
    ``emulator_args`` go to ``herder emu run`` (``--timing boot=2``); without ``cluster_endpoints`` the
    server has its default range of cluster endpoints, not one of the site's own."""
    workdir.mkdir(parents=True, exist_ok=True)
    endpoints = endpoint_range() if cluster_endpoints else ""
    flags = ("--cluster-endpoints", endpoints) if endpoints else ()
    with running(workdir / "server", *flags, *serve_args, port=port) as server:
        emulator = EmulatorProcess(
            data_dir=workdir / "emulator",
            machines=machines,
            machine_cidr=random_cidr(),
            extra_args=[*(["--register", str(server.kubeconfig)] if register else []), *emulator_args],
        )
        emulator.data_dir.mkdir(parents=True, exist_ok=True)
        emulator.start()
        try:
            asyncio.run(emulator.wait_ready())
            site = Site(server, emulator, workdir, endpoints)
            if register:
                site.until(lambda: len(site.connected()) == machines, timeout=60, what=f"{machines} machines")
            yield site
        finally:
            emulator.stop()


def resource(data: dict[str, Any]) -> Resource:
    return Resource.model_validate(data)


__all__ = ["Site", "cluster", "free_port", "machine_class", "machine_set", "resource", "running_site"]
