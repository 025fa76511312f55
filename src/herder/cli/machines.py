"""``herder machine``: register Talos machines by their endpoints, let a machine go for good, and read the
logs herder keeps of each (its services' and its kernel's), also of a machine reset or gone."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
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

app = typer.Typer(help="Machines: register them, release them, read their logs.", no_args_is_help=True)

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


FollowOption = Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines as they come.")]
TailOption = Annotated[
    int | None, typer.Option("--tail", min=0, help="Only the last N lines (then new ones, with -f).")
]
SinceOption = Annotated[
    str | None,
    typer.Option(
        "--since",
        help="Only lines herder received in the last DURATION (30s, 5m, 1h30m).",
        show_default=False,
    ),
]
TimestampsOption = Annotated[
    bool, typer.Option("--timestamps", help="Lead each line with the time herder received it.")
]


def _since(text: str | None) -> int | None:
    if text is None:
        return None
    from herder.resources.backups import duration_seconds

    try:
        return max(0, round(duration_seconds(text)))
    except ValueError as exc:
        raise fail(f"--since: {exc}") from None


def _print_log(
    uuid: str,
    namespace: str,
    kubeconfig: Path | None,
    *,
    service: str | None = None,
    kernel: bool = False,
    follow: bool,
    tail: int | None,
    since: str | None,
    timestamps: bool,
) -> None:
    since_seconds = _since(since)

    async def work() -> None:
        async with connect(kubeconfig) as client:
            async for line in client.machine_log(
                uuid,
                namespace,
                service=service,
                kernel=kernel,
                follow=follow,
                tail=tail,
                since_seconds=since_seconds,
                timestamps=timestamps,
            ):
                typer.echo(line)

    run(work)


@app.command()
def logs(
    uuid: Annotated[str, typer.Argument(help="The machine's UUID.")],
    service: Annotated[
        str | None,
        typer.Argument(
            help="The service (kubelet, etcd, machined…); every service's when left out.", show_default=False
        ),
    ] = None,
    follow: FollowOption = False,
    tail: TailOption = None,
    since: SinceOption = None,
    timestamps: TimestampsOption = False,
    namespace: NamespaceOption = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Print the service logs herder keeps of a machine (Reader of its cluster): what it followed through
    the Talos API while connected, kept across reboots and resets and after the machine is gone. Without
    SERVICE every service's lines, each led by its name."""
    _print_log(
        uuid,
        namespace,
        kubeconfig,
        service=service,
        follow=follow,
        tail=tail,
        since=since,
        timestamps=timestamps,
    )


@app.command()
def dmesg(
    uuid: Annotated[str, typer.Argument(help="The machine's UUID.")],
    follow: FollowOption = False,
    tail: TailOption = None,
    since: SinceOption = None,
    timestamps: TimestampsOption = False,
    namespace: NamespaceOption = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Print the kernel log herder keeps of a machine (Reader of its cluster), kept as its logs are."""
    _print_log(
        uuid, namespace, kubeconfig, kernel=True, follow=follow, tail=tail, since=since, timestamps=timestamps
    )


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
