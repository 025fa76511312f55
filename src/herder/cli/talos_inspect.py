"""``herder talos logs|dmesg|memory|processes|mounts|containers|stats|netstat|read|list|usage|service|restart``
and ``herder talos etcd status|alarm|defrag``: talosctl's commands that look inside a machine, and the few
that act on a running one without changing its config, over herder's Talos machine API client (directly,
or through herder's Talos API gateway with a talosconfig from ``herder cluster talosconfig``).

They take the connection options of every ``herder talos`` machine command (``talos_machine``). ``logs -f``
and ``dmesg -f`` stream until interrupted.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from herder.cli.errors import fail
from herder.cli.talos_machine import (
    EndpointsOption,
    InsecureOption,
    NodesOption,
    TalosconfigOption,
    TimeoutOption,
    etcd_app,
    label,
    run,
    target,
)
from herder.talos.api.machine import machine_pb2 as pb
from herder.talos.machine import MachineClient

KubernetesOption = Annotated[
    bool, typer.Option("--kubernetes", "-k", help="The Kubernetes (CRI) containers, not the system services.")
]

_MIB = 1 << 20


def _table(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        typer.echo("   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def logs(
    ctx: typer.Context,
    service: Annotated[
        str, typer.Argument(help="The service (kubelet, etcd, machined…) or, with -k, the container.")
    ],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    tail: Annotated[int, typer.Option("--tail", help="Only the last N lines first (-1: all).")] = -1,
    kubernetes: KubernetesOption = False,
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Print a service's log (or a Kubernetes container's), as talosctl logs does."""

    async def call(client: MachineClient, node: str | None) -> None:
        pending = b""
        async for chunk in client.logs(service, follow=follow, tail=tail, kubernetes=kubernetes, node=node):
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                typer.echo(f"{label(client, node)}: {line.decode('utf-8', 'replace')}")
        if pending:
            typer.echo(f"{label(client, node)}: {pending.decode('utf-8', 'replace')}")

    run(target(ctx, talosconfig, False, endpoints, nodes, timeout), call, single=follow)


def dmesg(
    ctx: typer.Context,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new messages.")] = False,
    tail: Annotated[bool, typer.Option("--tail", help="Only new messages (with --follow).")] = False,
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Print the kernel's messages, as talosctl dmesg does."""

    async def call(client: MachineClient, node: str | None) -> None:
        async for line in client.dmesg(follow=follow, tail=tail, node=node):
            typer.echo(f"{label(client, node)}: {line}")

    run(target(ctx, talosconfig, False, endpoints, nodes, timeout), call, single=follow)


def memory(
    ctx: typer.Context,
    talosconfig: TalosconfigOption = None,
    insecure: InsecureOption = False,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Print the nodes' memory in MiB, as talosctl memory does."""
    rows = [["NODE", "TOTAL", "USED", "FREE", "SHARED", "BUFFERS", "CACHE", "AVAILABLE"]]

    async def call(client: MachineClient, node: str | None) -> None:
        m = await client.memory(node=node)
        used = m.memtotal - m.memfree - m.cached - m.buffers
        figures = (m.memtotal, used, m.memfree, m.shmem, m.buffers, m.cached, m.memavailable)
        rows.append([label(client, node), *(str(v // 1024) for v in figures)])

    run(target(ctx, talosconfig, insecure, endpoints, nodes, timeout), call)
    _table(rows)


def processes(
    ctx: typer.Context,
    talosconfig: TalosconfigOption = None,
    insecure: InsecureOption = False,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """List the nodes' processes, as talosctl processes does."""
    rows = [["NODE", "PID", "STATE", "THREADS", "CPU-TIME", "VIRTMEM", "RESMEM", "COMMAND"]]

    async def call(client: MachineClient, node: str | None) -> None:
        for p in await client.processes(node=node):
            rows.append([
                label(client, node), str(p.pid), p.state, str(p.threads), f"{p.cpu_time:.2f}",
                f"{p.virtual_memory // _MIB}M", f"{p.resident_memory // _MIB}M", p.args or p.command,
            ])  # fmt: skip

    run(target(ctx, talosconfig, insecure, endpoints, nodes, timeout), call)
    _table(rows)


def mounts(
    ctx: typer.Context,
    talosconfig: TalosconfigOption = None,
    insecure: InsecureOption = False,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """List the nodes' mounted filesystems, as talosctl mounts does."""
    rows = [["NODE", "FILESYSTEM", "SIZE(GB)", "USED(GB)", "AVAILABLE(GB)", "PERCENT USED", "MOUNTED ON"]]

    async def call(client: MachineClient, node: str | None) -> None:
        for m in await client.mounts(node=node):
            used = m.size - m.available
            percent = f"{used / m.size * 100:.2f}%" if m.size else "-"
            rows.append([
                label(client, node), m.filesystem, f"{m.size / 1e9:.2f}", f"{used / 1e9:.2f}",
                f"{m.available / 1e9:.2f}", percent, m.mounted_on,
            ])  # fmt: skip

    run(target(ctx, talosconfig, insecure, endpoints, nodes, timeout), call)
    _table(rows)


def containers(
    ctx: typer.Context,
    kubernetes: KubernetesOption = False,
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """List the system services' containers, or with -k the Kubernetes ones."""
    rows = [["NODE", "NAMESPACE", "ID", "IMAGE", "PID", "STATUS"]]

    async def call(client: MachineClient, node: str | None) -> None:
        for c in await client.containers(kubernetes=kubernetes, node=node):
            rows.append([label(client, node), c.namespace, c.id, c.image, str(c.pid), c.status])

    run(target(ctx, talosconfig, False, endpoints, nodes, timeout), call)
    _table(rows)


def stats(
    ctx: typer.Context,
    kubernetes: KubernetesOption = False,
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """What each container uses (memory in MB, CPU time in ns)."""
    rows = [["NODE", "NAMESPACE", "ID", "MEMORY(MB)", "CPU"]]

    async def call(client: MachineClient, node: str | None) -> None:
        for s in await client.stats(kubernetes=kubernetes, node=node):
            rows.append(
                [label(client, node), s.namespace, s.id, f"{s.memory_usage / 1e6:.2f}", str(s.cpu_usage)]
            )

    run(target(ctx, talosconfig, False, endpoints, nodes, timeout), call)
    _table(rows)


def netstat(
    ctx: typer.Context,
    listening: Annotated[bool, typer.Option("--listening", "-l", help="Only listening sockets.")] = False,
    pids: Annotated[bool, typer.Option("--programs", "-p", help="Show the process of each socket.")] = False,
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """List the nodes' sockets, as talosctl netstat does."""
    rows = [
        ["NODE", "PROTO", "LOCAL ADDRESS", "FOREIGN ADDRESS", "STATE", *(["PID/PROGRAM"] if pids else [])]
    ]

    async def call(client: MachineClient, node: str | None) -> None:
        for r in await client.netstat(listening=listening, pids=pids, node=node):
            state = pb.ConnectRecord.State.Name(r.state)
            program = [f"{r.process.pid}/{r.process.name}"] if pids else []
            rows.append([
                label(client, node), r.l4proto, f"{r.localip}:{r.localport}", f"{r.remoteip}:{r.remoteport or '*'}",
                state, *program,
            ])  # fmt: skip

    run(target(ctx, talosconfig, False, endpoints, nodes, timeout), call)
    _table(rows)


def read(
    ctx: typer.Context,
    path: Annotated[str, typer.Argument(help="The file to print.")],
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Print a file of a node (os:admin), as talosctl read does."""

    async def call(client: MachineClient, node: str | None) -> None:
        async for chunk in client.read(path, node=node):
            sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()

    run(target(ctx, talosconfig, False, endpoints, nodes, timeout), call, single=True)


def list_files(
    ctx: typer.Context,
    path: Annotated[str, typer.Argument(help="The directory to list.")] = "/",
    recurse: Annotated[bool, typer.Option("--recurse", "-r", help="List its subdirectories too.")] = False,
    depth: Annotated[int, typer.Option("--depth", "-d", help="With -r: this many levels (0: all).")] = 0,
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """List a directory of the nodes, as talosctl list does."""
    rows = [["NODE", "NAME"]]

    async def call(client: MachineClient, node: str | None) -> None:
        for f in await client.list_files(path, recurse=recurse, depth=depth, node=node):
            if f.error:
                raise fail(f"{label(client, node)}: {f.error}")
            rows.append([label(client, node), f.relative_name])

    run(target(ctx, talosconfig, False, endpoints, nodes, timeout), call)
    _table(rows)


def usage(
    ctx: typer.Context,
    paths: Annotated[list[str] | None, typer.Argument(help="Directories to sum (default: /).")] = None,
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Print the disk usage of directories of the nodes, as talosctl usage does."""
    rows = [["NODE", "SIZE(B)", "NAME"]]

    async def call(client: MachineClient, node: str | None) -> None:
        for u in await client.disk_usage(*(paths or ["/"]), node=node):
            if u.error:
                raise fail(f"{label(client, node)}: {u.error}")
            rows.append([label(client, node), str(u.size), u.name])

    run(target(ctx, talosconfig, False, endpoints, nodes, timeout), call)
    _table(rows)


def service(
    ctx: typer.Context,
    id_: Annotated[str, typer.Argument(metavar="SERVICE", help="The service (kubelet).")],
    action: Annotated[str, typer.Argument(help="start, stop or restart.")],
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Start, stop or restart a service of the nodes (Talos allows it for the kubelet)."""
    if action not in ("start", "stop", "restart"):
        raise fail(f"unknown action {action!r}: expected start, stop or restart")

    async def call(client: MachineClient, node: str | None) -> None:
        typer.echo(f"{label(client, node)}: {await client.service(id_, action, node=node)}")

    run(target(ctx, talosconfig, False, endpoints, nodes, timeout), call)


def restart(
    ctx: typer.Context,
    id_: Annotated[str, typer.Argument(metavar="ID", help="The container.")],
    kubernetes: KubernetesOption = False,
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Restart a container of the nodes."""

    async def call(client: MachineClient, node: str | None) -> None:
        await client.restart(id_, kubernetes=kubernetes, node=node)
        typer.echo(f"{label(client, node)}: restarted {id_}")

    run(target(ctx, talosconfig, False, endpoints, nodes, timeout), call)


@etcd_app.command("status")
def etcd_status(
    ctx: typer.Context,
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """Print the etcd member status of control plane nodes."""
    rows = [["NODE", "MEMBER", "DB SIZE", "IN USE", "LEADER", "RAFT INDEX", "RAFT TERM", "LEARNER", "ERRORS"]]

    async def call(client: MachineClient, node: str | None) -> None:
        s = await client.etcd_status(node=node)
        rows.append([
            label(client, node), f"{s.member_id:x}", str(s.db_size), str(s.db_size_in_use), f"{s.leader:x}",
            str(s.raft_index), str(s.raft_term), str(s.is_learner).lower(), ", ".join(s.errors),
        ])  # fmt: skip

    run(target(ctx, talosconfig, False, endpoints, nodes, timeout), call)
    _table(rows)


@etcd_app.command("alarm")
def etcd_alarm(
    ctx: typer.Context,
    action: Annotated[str, typer.Argument(help="list or disarm.")] = "list",
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 30.0,
) -> None:
    """List or disarm etcd's alarms (no space, corruption)."""
    if action not in ("list", "disarm"):
        raise fail(f"unknown action {action!r}: expected list or disarm")

    async def call(client: MachineClient, node: str | None) -> None:
        alarms = await (
            client.etcd_alarms(node=node) if action == "list" else client.etcd_alarm_disarm(node=node)
        )
        if not alarms:
            typer.echo(f"{label(client, node)}: no alarms" + (" to disarm" if action == "disarm" else ""))
        for a in alarms:
            typer.echo(
                f"{label(client, node)}\t{a.member_id:x}\t{pb.EtcdMemberAlarm.AlarmType.Name(a.alarm)}"
            )

    run(target(ctx, talosconfig, False, endpoints, nodes, timeout), call)


@etcd_app.command("defrag")
def etcd_defrag(
    ctx: typer.Context,
    talosconfig: TalosconfigOption = None,
    endpoints: EndpointsOption = None,
    nodes: NodesOption = None,
    timeout: TimeoutOption = 300.0,
) -> None:
    """Defragment etcd's database on a control plane node."""

    async def call(client: MachineClient, node: str | None) -> None:
        await client.etcd_defragment(node=node)
        typer.echo(f"{label(client, node)}: etcd defragmented")

    run(target(ctx, talosconfig, False, endpoints, nodes, timeout), call, single=True)


def register(app: typer.Typer) -> None:
    """Add the commands to the ``herder talos`` group."""
    app.command("logs")(logs)
    app.command("dmesg")(dmesg)
    app.command("memory")(memory)
    app.command("processes")(processes)
    app.command("mounts")(mounts)
    app.command("containers")(containers)
    app.command("stats")(stats)
    app.command("netstat")(netstat)
    app.command("read")(read)
    app.command("list")(list_files)
    app.command("usage")(usage)
    app.command("service")(service)
    app.command("restart")(restart)
