"""``herder machine``: register Talos machines by their endpoints, and let a machine go for good."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated

import typer

from herder.cli.common import KubeconfigOption, connect, err, out, run
from herder.cli.errors import fail
from herder.client import AlreadyExists, Client
from herder.resources import Resource
from herder.resources.machines import (
    FORCE_RELEASE_ANNOTATION,
    MACHINE,
    MACHINE_REGISTRATION,
    normalize_endpoint,
    registration_name,
)
from herder.resources.status import find_condition

app = typer.Typer(help="Machines: register them, and release them.", no_args_is_help=True)

NamespaceOption = Annotated[str, typer.Option("--namespace", "-n", help="Namespace of the machines.")]


@app.command()
def add(
    endpoints: Annotated[list[str], typer.Argument(help="Talos API endpoints: IP or IP:PORT (port 50000).")],
    wait: Annotated[float, typer.Option("--wait", help="Seconds to wait for each machine to answer.")] = 60.0,
    namespace: NamespaceOption = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Register machines (Admin): herder connects to each in maintenance mode and makes its Machine,
    named by the UUID the machine reports. Prints UUID and endpoint of each, one per line."""
    try:
        wanted = [normalize_endpoint(e) for e in endpoints]
    except ValueError as exc:
        raise fail(str(exc)) from None

    async def work() -> list[tuple[str, str, str]]:
        async with connect(kubeconfig) as client:
            for endpoint in wanted:
                with contextlib.suppress(AlreadyExists):
                    await client.create(_registration(endpoint, namespace))
            err.print(f"waiting for {len(wanted)} machine(s) to answer…", markup=False)
            return await asyncio.gather(*(_registered(client, e, namespace, wait) for e in wanted))

    failed = False
    for endpoint, uuid, problem in run(work):
        if uuid:
            out.print(f"{uuid}\t{endpoint}", markup=False)
        else:
            failed = True
            err.print(f"error: {endpoint}: {problem}", markup=False)
    if failed:
        raise typer.Exit(1)


def _registration(endpoint: str, namespace: str) -> Resource:
    return Resource.model_validate(
        {
            "apiVersion": MACHINE_REGISTRATION.api_version,
            "kind": MACHINE_REGISTRATION.kind,
            "metadata": {"name": registration_name(endpoint), "namespace": namespace},
            "spec": {"endpoint": endpoint},
        }
    )


async def _registered(client: Client, endpoint: str, namespace: str, wait: float) -> tuple[str, str, str]:
    """(endpoint, the machine's UUID or "", what went wrong) once the registration is decided."""
    name = registration_name(endpoint)
    problem = "no answer yet"
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(wait):
            async for event in client.watch(
                MACHINE_REGISTRATION, namespace, field_selector=f"metadata.name={name}"
            ):
                status = event.object.status or {}
                if status.get("machine"):
                    return endpoint, str(status["machine"]), ""
                ready = find_condition(status.get("conditions"), "Ready") or {}
                problem = str(status.get("lastError") or ready.get("message") or problem)
    return endpoint, "", f"not registered after {wait:.0f}s: {problem}"


@app.command()
def release(
    uuid: Annotated[str, typer.Argument(help="The machine's UUID.")],
    force: Annotated[
        bool, typer.Option("--force", help="Release it without resetting it (it cannot be reached).")
    ] = False,
    namespace: NamespaceOption = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Let a machine that herder cannot reach leave its cluster without a reset (Admin; audited), so
    that the cluster's teardown or scale-down goes on. The machine keeps whatever it ran."""
    if not force:
        raise fail(
            "a machine leaves its cluster when its machine set lets it go (and is reset then); "
            "--force releases one that cannot be reached, without a reset"
        )

    async def work() -> None:
        async with connect(kubeconfig) as client:
            patch = {"metadata": {"annotations": {FORCE_RELEASE_ANNOTATION: "true"}}}
            await client.patch(MACHINE, uuid, patch, namespace=namespace)

    run(work)
    out.print(f"machine/{uuid} released without a reset", markup=False)


@app.command("config-history")
def config_history(
    uuid: Annotated[str, typer.Argument(help="The machine's UUID.")],
    limit: Annotated[
        int, typer.Option("--limit", help="Show the newest N configs only (0: all).", min=0)
    ] = 0,
    output: Annotated[str, typer.Option("--output", "-o", help="text (diffs), json or yaml.")] = "text",
    namespace: NamespaceOption = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """The configs herder applied to the machine, newest first, each as a diff from the one before with its
    secrets redacted (Operator on the machine's cluster and up): the newest 100, of the last 30 days."""
    import json

    import yaml

    from herder.client import NotFound
    from herder.resources.config_history import MACHINE_CONFIG_HISTORY, MachineConfigHistorySpec

    if output not in ("text", "json", "yaml"):
        raise fail(f"--output: {output!r} is not text, json or yaml")

    async def work() -> Resource:
        async with connect(kubeconfig) as client:
            try:
                return await client.get(MACHINE_CONFIG_HISTORY, uuid, namespace=namespace)
            except NotFound:
                pass
            try:  # the platform's machines' histories are kept hidden, for Support
                return await client.get(MACHINE_CONFIG_HISTORY, f"herder-{uuid}", namespace=namespace)
            except NotFound:
                raise fail(
                    f"machine {uuid} has no config history: herder has applied no config to it"
                ) from None

    history = run(work)
    spec = MACHINE_CONFIG_HISTORY.spec_of(history, MachineConfigHistorySpec)
    entries = list(reversed(spec.entries))[: limit or None]
    if output != "text":
        dumped = [e.model_dump(mode="json", by_alias=True) for e in entries]
        text = json.dumps(dumped, indent=2) if output == "json" else yaml.safe_dump(dumped, sort_keys=False)
        out.print(text.rstrip("\n"), markup=False, highlight=False)
        return
    for entry in entries:
        out.print(
            f"revision {entry.revision}  applied {entry.applied_at}  config {entry.hash[:12]}  "
            f"{entry.mode}  +{entry.added} -{entry.removed}",
            markup=False,
            highlight=False,
        )
        out.print(entry.diff or "(no change)", markup=False, highlight=False)
        out.print("", markup=False)
