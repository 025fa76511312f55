"""``herder talos version|apply-config|bootstrap|upgrade|reboot|reset|shutdown|events|services|etcd …|
kubeconfig|get``: talosctl's machine commands over herder's Talos machine API client, and ``get`` over its
resource API client.

Each command takes ``--talosconfig FILE`` (default ``$TALOSCONFIG``, then ``~/.talos/config``) or
``--insecure`` (maintenance mode), ``-e/--endpoints`` and ``-n/--nodes`` (default: the talosconfig
context's). A call made to several nodes runs once per node. Errors end with one line on stderr, exit 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from herder.cli.errors import UsageFailure, fail
from herder.cli.files import write_private
from herder.talos.machine import ApplyMode, MachineAPIError, MachineClient, RebootMode
from herder.talos.machine.resources import ResourceDefinitionSpec, TalosResource
from herder.talos.machine.types import (
    ConfigValidationErrorEvent,
    MachineEvent,
    MachineStatus,
    PhaseEvent,
    SequenceEvent,
    ServiceStateEvent,
    TaskEvent,
)
from herder.talos.talosconfig import TalosconfigError, load_talosconfig_file

TalosconfigOption = Annotated[
    Path | None,
    typer.Option(
        "--talosconfig",
        help="talosconfig to use (default: $TALOSCONFIG, then ~/.talos/config).",
        show_default=False,
    ),
]
InsecureOption = Annotated[
    bool,
    typer.Option("--insecure", "-i", help="Talk to a machine in maintenance mode: no client certificate."),
]
EndpointsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--endpoints", "-e", help="Endpoint(s) to connect to (default: the context's).", show_default=False
    ),
]
NodesOption = Annotated[
    list[str] | None,
    typer.Option(
        "--nodes",
        "-n",
        help="Target node(s), proxied by the endpoint (default: the context's).",
        show_default=False,
    ),
]
TimeoutOption = Annotated[float, typer.Option("--timeout", help="Seconds to wait for each call.")]


@dataclass(frozen=True)
class Target:
    """Where and how a command connects."""

    talosconfig: Path | None
    insecure: bool
    endpoints: list[str] | None
    nodes: list[str] | None
    timeout: float

    def _config_path(self) -> Path:
        if self.talosconfig is not None:
            return self.talosconfig
        env = os.environ.get("TALOSCONFIG")
        return Path(env) if env else Path.home() / ".talos" / "config"

    def nodes_to_call(self) -> list[str | None]:
        if self.nodes:
            return list(self.nodes)
        if self.insecure:
            return [None]
        context = load_talosconfig_file(self._config_path()).current()
        return list(context.nodes) or [None]

    def client(self) -> MachineClient:
        endpoint = self.endpoints[0] if self.endpoints else None
        if self.insecure:
            target = endpoint or (self.nodes[0] if self.nodes else None)
            if not target:
                raise TalosconfigError("--insecure needs an endpoint (-e) or a node (-n)")
            return MachineClient.insecure(target, timeout=self.timeout)
        config = load_talosconfig_file(self._config_path())
        if endpoint is None and not config.current().endpoints and self.nodes:
            endpoint = self.nodes[0]
        return MachineClient.from_talosconfig(config, endpoint=endpoint, timeout=self.timeout)


@dataclass(frozen=True)
class _Defaults:
    """Connection options given before the command (``herder talos -e E -n N version``), as talosctl allows."""

    talosconfig: Path | None = None
    insecure: bool = False
    endpoints: list[str] | None = None
    nodes: list[str] | None = None


def target(
    ctx: typer.Context,
    talosconfig: Path | None,
    insecure: bool,
    endpoints: list[str] | None,
    nodes: list[str] | None,
    timeout: float,
) -> Target:
    """The command's own options, falling back to those given before the command."""
    given = ctx.obj if isinstance(ctx.obj, _Defaults) else _Defaults()
    return Target(
        talosconfig=talosconfig or given.talosconfig,
        insecure=insecure or given.insecure,
        endpoints=_split(endpoints or given.endpoints),
        nodes=_split(nodes or given.nodes),
        timeout=timeout,
    )


def _split(values: list[str] | None) -> list[str] | None:
    """Repeated options and comma-separated lists alike (``-n a,b`` is ``-n a -n b``), as talosctl takes them."""
    if values is None:
        return None
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def _connection_options(
    ctx: typer.Context,
    talosconfig: TalosconfigOption = None,
    insecure: InsecureOption = False,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
) -> None:
    ctx.obj = _Defaults(talosconfig, insecure, endpoints, nodes)


def run(
    target: Target, call: Callable[[MachineClient, str | None], Awaitable[None]], *, single: bool = False
) -> None:
    """Run ``call`` once per target node (a node of None means the endpoint itself)."""

    async def main() -> None:
        nodes = target.nodes_to_call()
        if single and len(nodes) > 1:
            raise fail("this command works on one node at a time: give a single -n")
        async with target.client() as client:
            for node in nodes:
                await call(client, node)

    try:
        asyncio.run(main())
    except (MachineAPIError, TalosconfigError, UsageFailure) as e:
        raise fail(str(e)) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def label(client: MachineClient, node: str | None) -> str:
    return node or client.endpoint


def _mode(value: str) -> ApplyMode:
    try:
        return ApplyMode[value.upper().replace("-", "_")]
    except KeyError:
        raise fail(f"unknown mode {value!r}: expected auto, no-reboot, reboot, staged or try") from None


def _seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)?", value.strip())
    if match is None:
        raise fail(f"invalid duration {value!r}: expected e.g. 30s, 2m, 1h")
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match.group(2) or "s"]
    return float(match.group(1)) * scale


def version(
    ctx: typer.Context,
    talosconfig: TalosconfigOption = None,
    insecure: InsecureOption = False,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Print the Talos version of each node."""

    async def call(client: MachineClient, node: str | None) -> None:
        v = await client.version(node=node)
        typer.echo(
            f"{label(client, node)}\tTag: {v.tag}\tSHA: {v.sha}\tOS/Arch: {v.os}/{v.arch}\tPlatform: {v.platform}"
        )

    run(target(ctx, talosconfig, insecure, endpoints, nodes, timeout), call)


def apply_config(
    ctx: typer.Context,
    file: Annotated[
        Path, typer.Option("--file", "-f", help="The machine config to apply.", show_default=False)
    ],
    mode: Annotated[
        str, typer.Option("--mode", "-m", help="auto, no-reboot, reboot, staged or try.")
    ] = "auto",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Check and show the diff, change nothing.")
    ] = False,
    try_timeout: Annotated[
        str, typer.Option("--timeout-try", help="How long a try-mode config lasts.")
    ] = "1m",
    talosconfig: TalosconfigOption = None,
    insecure: InsecureOption = False,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Apply a machine config (in maintenance mode, with --insecure)."""
    try:
        data = file.read_bytes()
    except OSError as e:
        raise fail(f"cannot read {file}: {e.strerror or e}") from None
    apply_mode = _mode(mode)
    try_seconds = _seconds(try_timeout) if apply_mode is ApplyMode.TRY else None

    async def call(client: MachineClient, node: str | None) -> None:
        result = await client.apply_configuration(
            data, mode=apply_mode, dry_run=dry_run, try_timeout=try_seconds, node=node
        )
        for warning in result.warnings:
            typer.echo(f"{label(client, node)}: warning: {warning}", err=True)
        typer.echo(f"{label(client, node)}: {result.details}")

    run(target(ctx, talosconfig, insecure, endpoints, nodes, timeout), call)


def bootstrap(
    ctx: typer.Context,
    recover_etcd: Annotated[
        bool, typer.Option("--recover-etcd", help="Restore the snapshot uploaded before.")
    ] = False,
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Bootstrap etcd on one control plane node (once per cluster)."""

    async def call(client: MachineClient, node: str | None) -> None:
        await client.bootstrap(recover_etcd=recover_etcd, node=node)
        typer.echo(f"{label(client, node)}: bootstrapped")

    run(target(ctx, talosconfig, False, endpoints, nodes, timeout), call, single=True)


def upgrade(
    ctx: typer.Context,
    image: Annotated[
        str,
        typer.Option(
            "--image", help="Installer image, e.g. ghcr.io/siderolabs/installer:v1.13.9.", show_default=False
        ),
    ],
    preserve: Annotated[bool, typer.Option("--preserve", help="Keep the ephemeral data.")] = False,
    stage: Annotated[bool, typer.Option("--stage", help="Stage the upgrade for the next reboot.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Skip the etcd health checks.")] = False,
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Upgrade Talos on the nodes."""

    async def call(client: MachineClient, node: str | None) -> None:
        result = await client.upgrade(image, preserve=preserve, stage=stage, force=force, node=node)
        typer.echo(f"{label(client, node)}: {result.ack} (actor {result.actor_id})")

    run(target(ctx, talosconfig, False, endpoints, nodes, timeout), call)


def _action(name: str, invoke: Callable[[MachineClient, str | None], Awaitable[str]], target: Target) -> None:
    async def call(client: MachineClient, node: str | None) -> None:
        actor = await invoke(client, node)
        typer.echo(f"{label(client, node)}: {name} (actor {actor})")

    run(target, call)


def reboot(
    ctx: typer.Context,
    mode: Annotated[str, typer.Option("--mode", "-m", help="default or powercycle.")] = "default",
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Reboot the nodes."""
    try:
        reboot_mode = RebootMode[mode.upper()]
    except KeyError:
        raise fail(f"unknown reboot mode {mode!r}: expected default or powercycle") from None
    _action(
        "rebooting",
        lambda c, n: c.reboot(mode=reboot_mode, node=n),
        target(ctx, talosconfig, False, endpoints, nodes, timeout),
    )


def reset(
    ctx: typer.Context,
    graceful: Annotated[
        bool, typer.Option("--graceful/--no-graceful", help="Leave etcd first (control planes).")
    ] = True,
    reboot_after: Annotated[
        bool, typer.Option("--reboot", help="Reboot into maintenance mode instead of powering off.")
    ] = False,
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Wipe the nodes back to maintenance mode."""
    _action(
        "resetting",
        lambda c, n: c.reset(graceful=graceful, reboot=reboot_after, node=n),
        target(ctx, talosconfig, False, endpoints, nodes, timeout),
    )


def shutdown(
    ctx: typer.Context,
    force: Annotated[bool, typer.Option("--force", help="Do not cordon and drain first.")] = False,
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Power the nodes off."""
    _action(
        "shutting down",
        lambda c, n: c.shutdown(force=force, node=n),
        target(ctx, talosconfig, False, endpoints, nodes, timeout),
    )


def describe_event(event: MachineEvent) -> str:
    """One line for an event, as ``talosctl events`` prints it."""
    p = event.payload
    if isinstance(p, MachineStatus):
        unmet = ", ".join(f"{c.name}: {c.reason}" for c in p.unmet_conditions)
        text = f"stage: {p.stage.name} ready: {str(p.ready).lower()}" + (f" unmet: {unmet}" if unmet else "")
    elif isinstance(p, SequenceEvent):
        text = f"sequence {p.sequence}: {p.action}" + (f" error: {p.error}" if p.error else "")
    elif isinstance(p, PhaseEvent):
        text = f"phase {p.phase}: {p.action}"
    elif isinstance(p, TaskEvent):
        text = f"task {p.task}: {p.action}"
    elif isinstance(p, ServiceStateEvent):
        text = f"service {p.service}: {p.action} {p.message}".rstrip()
    elif isinstance(p, ConfigValidationErrorEvent):
        text = f"config validation error: {p.error}"
    else:
        text = event.type_url
    return f"{event.node}\t{event.id}\t{text}"


def events(
    ctx: typer.Context,
    tail: Annotated[int, typer.Option("--tail", help="Show this many past events first (-1: all).")] = 0,
    since_id: Annotated[str, typer.Option("--since", help="Show the events after this id first.")] = "",
    actor_id: Annotated[str, typer.Option("--actor-id", help="Only the events of this actor.")] = "",
    duration: Annotated[
        float, typer.Option("--duration", help="Stop after this many seconds (0: never).")
    ] = 0.0,
    talosconfig: TalosconfigOption = None,
    insecure: InsecureOption = False,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Stream the node's events."""

    async def follow(client: MachineClient, node: str | None) -> None:
        async for event in client.events(tail_events=tail, tail_id=since_id, actor_id=actor_id, node=node):
            typer.echo(describe_event(event))

    async def call(client: MachineClient, node: str | None) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(duration or None):
                await follow(client, node)

    run(target(ctx, talosconfig, insecure, endpoints, nodes, timeout), call, single=True)


def services(
    ctx: typer.Context,
    talosconfig: TalosconfigOption = None,
    insecure: InsecureOption = False,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """List the services of each node and their health."""

    async def call(client: MachineClient, node: str | None) -> None:
        for s in await client.service_list(node=node):
            health = "?" if s.health_unknown else ("OK" if s.healthy else "Fail")
            typer.echo(f"{label(client, node)}\t{s.id}\t{s.state}\t{health}\t{s.last_message}".rstrip())

    run(target(ctx, talosconfig, insecure, endpoints, nodes, timeout), call)


def kubeconfig(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="Where to write the admin kubeconfig.", show_default=False)],
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Fetch the cluster's admin kubeconfig from a control plane node."""

    async def call(client: MachineClient, node: str | None) -> None:
        data = await client.kubeconfig(node=node)
        write_private(file, data)
        typer.echo(f"{label(client, node)}: kubeconfig written to {file}")

    run(target(ctx, talosconfig, False, endpoints, nodes, timeout), call, single=True)


def get(
    ctx: typer.Context,
    type_: Annotated[
        str,
        typer.Argument(
            metavar="TYPE",
            help="Resource type, id or alias (e.g. disks, systeminformation).",
            show_default=False,
        ),
    ],
    id_: Annotated[
        str | None, typer.Argument(metavar="[ID]", help="One resource of the type.", show_default=False)
    ] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="table, yaml or json.")] = "table",
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", help="Namespace (default: the type's).", show_default=False),
    ] = None,
    talosconfig: TalosconfigOption = None,
    insecure: InsecureOption = False,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Print resources of the nodes, as talosctl get: one by id, or all of a type."""
    if output not in ("table", "yaml", "json"):
        raise fail(f"unknown output {output!r}: expected table, yaml or json")
    where_to = target(ctx, talosconfig, insecure, endpoints, nodes, timeout)
    found: list[TalosResource] = []
    definitions: list[ResourceDefinitionSpec] = []

    async def call(client: MachineClient, node: str | None) -> None:
        if not definitions:
            # The type is resolved once, on the first node, as talosctl does.
            definitions.append(await client.resolve_resource_type(type_, node=node))
        definition = definitions[0]
        where = namespace or definition.default_namespace
        if id_ is None:
            found.extend(await client.list_resources(where, definition.type, node=node))
        else:
            found.append(await client.get_resource(where, definition.type, id_, node=node))

    run(where_to, call)
    if output == "table":
        typer.echo(_resource_table(definitions[0], found), nl=False)
    elif output == "yaml":
        typer.echo(
            "---\n".join(yaml.safe_dump(_resource_document(r), sort_keys=False) for r in found), nl=False
        )
    else:
        for r in found:
            typer.echo(json.dumps(_resource_document(r), indent=4, default=str))


def _resource_document(resource: TalosResource) -> dict[str, Any]:
    """A resource as talosctl prints it in YAML or JSON: node, metadata, spec."""
    md = resource.metadata
    metadata: dict[str, Any] = {
        "namespace": md.namespace,
        "type": md.type,
        "id": md.id,
        "version": int(md.version) if md.version.isdigit() else md.version,
        "owner": md.owner,
        "phase": md.phase,
        "created": _rfc3339(md.created),
        "updated": _rfc3339(md.updated),
    }
    for key, values in (("labels", md.labels), ("annotations", md.annotations)):
        if values:
            metadata[key] = dict(values)
    if md.finalizers:
        metadata["finalizers"] = list(md.finalizers)
    return {"node": resource.node, "metadata": metadata, "spec": resource.spec}


def _rfc3339(moment: Any) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ") if moment is not None else ""


def _resource_table(definition: ResourceDefinitionSpec, found: list[TalosResource]) -> str:
    """talosctl's table: node, namespace, type, id, version, then the type's print columns."""
    header = [
        "NODE",
        "NAMESPACE",
        "TYPE",
        "ID",
        "VERSION",
        *(c.name.upper() for c in definition.print_columns),
    ]
    rows = [header]
    for r in found:
        md = r.metadata
        columns = [_json_path(c.json_path, r.spec) for c in definition.print_columns]
        rows.append([r.node, md.namespace, definition.display_type, md.id, md.version, *columns])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "".join(
        "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() + "\n"
        for row in rows
    )


def _json_path(expression: str, value: Any) -> str:
    """The few JSONPath forms resource definitions use for their columns: ``{.a.b}`` and ``{.list[:]}``."""
    path = expression.strip().removeprefix("{").removesuffix("}").removeprefix(".")
    every = path.endswith("[:]")
    for key in path.removesuffix("[:]").split(".") if path else ():
        value = value.get(key) if isinstance(value, dict) else None
    if value is None:
        return ""
    if every and isinstance(value, list):
        return " ".join(_cell(v) for v in value)
    return _cell(value)


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


etcd_app = typer.Typer(help="etcd membership and snapshots of control plane nodes.", no_args_is_help=True)


@etcd_app.command("members")
def etcd_members(
    ctx: typer.Context,
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """List the etcd members as a node sees them."""

    async def call(client: MachineClient, node: str | None) -> None:
        for m in await client.etcd_member_list(node=node):
            learner = "true" if m.is_learner else "false"
            typer.echo(
                f"{label(client, node)}\t{m.id:x}\t{m.hostname}\t{','.join(m.peer_urls)}\t{','.join(m.client_urls)}\t{learner}"
            )

    run(target(ctx, talosconfig, False, endpoints, nodes, timeout), call)


def _etcd_call(
    name: str, invoke: Callable[[MachineClient, str | None], Awaitable[object]], target: Target
) -> None:
    async def call(client: MachineClient, node: str | None) -> None:
        result = await invoke(client, node)
        suffix = f": {result}" if isinstance(result, str) and result else ""
        typer.echo(f"{label(client, node)}: {name}{suffix}")

    run(target, call)


@etcd_app.command("leave")
def etcd_leave(
    ctx: typer.Context,
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Make the node leave etcd."""
    _etcd_call(
        "left etcd",
        lambda c, n: c.etcd_leave_cluster(node=n),
        target(ctx, talosconfig, False, endpoints, nodes, timeout),
    )


@etcd_app.command("forfeit-leadership")
def etcd_forfeit_leadership(
    ctx: typer.Context,
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Make the node hand etcd leadership to another member."""
    _etcd_call(
        "leadership forfeited",
        lambda c, n: c.etcd_forfeit_leadership(node=n),
        target(ctx, talosconfig, False, endpoints, nodes, timeout),
    )


@etcd_app.command("remove-member")
def etcd_remove_member(
    ctx: typer.Context,
    member_id: Annotated[
        str, typer.Argument(help="Member id (hex, as `etcd members` prints it).", show_default=False)
    ],
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Remove a member (one with no Talos node anymore) from etcd."""
    try:
        ident = int(member_id, 16)
    except ValueError:
        raise fail(f"invalid member id {member_id!r}: expected hexadecimal") from None
    _etcd_call(
        f"removed member {member_id}",
        lambda c, n: c.etcd_remove_member_by_id(ident, node=n),
        target(ctx, talosconfig, False, endpoints, nodes, timeout),
    )


@etcd_app.command("snapshot")
def etcd_snapshot(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="Where to write the snapshot.", show_default=False)],
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 300.0,
) -> None:
    """Save a snapshot of etcd from a control plane node."""

    async def call(client: MachineClient, node: str | None) -> None:
        data = await client.etcd_snapshot(node=node)
        write_private(file, data)
        typer.echo(f"{label(client, node)}: etcd snapshot saved to {file} ({len(data)} bytes)")

    run(target(ctx, talosconfig, False, endpoints, nodes, timeout), call, single=True)


def register(app: typer.Typer) -> None:
    """Add the machine API commands to the ``herder talos`` group."""
    app.command("version")(version)
    app.command("apply-config")(apply_config)
    app.command("bootstrap")(bootstrap)
    app.command("upgrade")(upgrade)
    app.command("reboot")(reboot)
    app.command("reset")(reset)
    app.command("shutdown")(shutdown)
    app.command("events")(events)
    app.command("services")(services)
    app.command("kubeconfig")(kubeconfig)
    app.command("get")(get)
    app.add_typer(etcd_app, name="etcd")
    app.callback()(_connection_options)
