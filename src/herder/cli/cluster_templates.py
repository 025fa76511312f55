"""``herder cluster template``: clusters kept as Omni cluster templates. ``validate`` and ``render`` work
offline; ``sync``, ``diff``, ``status``, ``delete`` and ``export`` talk to the server."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.live import Live
from rich.text import Text
from rich.tree import Tree

from herder.cli.common import KubeconfigOption, connect, err, out, run
from herder.cli.errors import UsageFailure, fail, one_line_errors
from herder.cli.files import STDOUT
from herder.cli.template_status import Line, follow_cluster, tree
from herder.cli.template_sync import live_objects, plan_for, sync
from herder.cli.watching import Watched
from herder.client import NotFound
from herder.resources.clusters import CLUSTER
from herder.templates import CheckedTemplate, check_file
from herder.templates.documents import duration_seconds
from herder.templates.export import Unexportable, export_template
from herder.templates.yaml_text import dump_all

app = typer.Typer(
    help="Clusters as Omni cluster templates: validate and render offline; sync, diff, status, delete, export.",
    no_args_is_help=True,
)

FileOption = Annotated[Path, typer.Option("--file", "-f", help="The template file.")]
NamespaceOption = Annotated[str, typer.Option("--namespace", "-n", help="Namespace of the cluster.")]


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return duration_seconds(text)


def _check(path: Path, namespace: str = "default") -> CheckedTemplate:
    """The checked template, its warnings printed; exits 1 printing every error if it has any."""
    checked = check_file(path, namespace)
    for warning in checked.problems.warnings:
        err.print(f"warning: {warning}", markup=False)
    if checked.problems.errors:
        for error in checked.problems.errors:
            err.print(f"error: {error}", markup=False)
        raise typer.Exit(1)
    return checked


def _templates(sources: list[Path]) -> list[Path]:
    """The template files named: files as given, and a directory's ``*.yaml``/``*.yml`` files (not its
    subfolders, where patch files live)."""
    files: list[Path] = []
    for source in sources:
        if source.is_dir():
            found = sorted(p for p in source.iterdir() if p.is_file() and p.suffix in (".yaml", ".yml"))
            if not found:
                raise fail(f"{source}: no *.yaml or *.yml templates in this directory")
            files += found
        else:
            files.append(source)
    return files


@app.command()
def validate(file: FileOption, kubeconfig: KubeconfigOption = None) -> None:
    """Check a template offline (no server is asked; --kubeconfig is accepted as everywhere): every
    error (file, document, field and reason), and the fields herder has no counterpart for as
    warnings. Exit 0 when valid, 1 otherwise."""
    checked = _check(file)
    out.print(
        f"{file}: valid: cluster {checked.cluster_name}, {len(checked.resources)} objects", markup=False
    )


@app.command()
def render(
    file: FileOption, namespace: NamespaceOption = "default", kubeconfig: KubeconfigOption = None
) -> None:
    """Print the herder objects a template makes, as YAML (offline: no server is asked)."""
    checked = _check(file, namespace)
    sys.stdout.write(dump_all(r.to_dict() for r in checked.resources))


@app.command("sync")
def sync_command(
    files: Annotated[
        list[Path], typer.Option("--file", "-f", help="A template file, or a directory of them.")
    ],
    wait: Annotated[
        str, typer.Option("--wait", help="How long to wait for allocations and teardowns.")
    ] = "10m",
    namespace: NamespaceOption = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Make the cluster what its template says: create, then update, then delete (machine sets first,
    waiting for their teardown), never touching another cluster's objects or a controller's. Several
    files or a directory sync one after another; all are checked before any is synced."""
    with one_line_errors(ValueError):
        timeout = _seconds(wait)
    templates = [_check(path, namespace) for path in _templates(files)]

    async def work() -> None:
        async with connect(kubeconfig) as client:
            for checked in templates:
                await sync(
                    client,
                    checked,
                    namespace,
                    timeout,
                    lambda line: out.print(line, markup=False),
                    lambda line: err.print(line, markup=False),
                )

    with one_line_errors():
        run(work)


@app.command()
def diff(
    file: FileOption, namespace: NamespaceOption = "default", kubeconfig: KubeconfigOption = None
) -> None:
    """Print what sync would change, a unified diff per object; nothing when the cluster is in sync.
    Exits 0 either way."""
    checked = _check(file, namespace)

    async def work() -> None:
        async with connect(kubeconfig) as client:
            current = await plan_for(client, checked, namespace)
        for conflict in current.conflicts:
            err.print(f"conflict: {conflict}", markup=False)
        for change in current.changes:
            sys.stdout.write(change.diff())
        for node in current.pending_nodes:
            sys.stdout.write(f"# machine {node.name}: set once its machine set allocates it\n")

    run(work)


@app.command()
def status(
    file: FileOption,
    wait: Annotated[
        str | None, typer.Option("--wait", help="Wait this long (90s, 5m…) for the cluster to be healthy.")
    ] = None,
    namespace: NamespaceOption = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Show the template's cluster as a tree (cluster → machine sets → machines) as it changes. Exit 0
    once it is Ready with every upgrade done, 1 if it is not (after --wait)."""
    checked = _check(file, namespace)
    with one_line_errors(ValueError):
        timeout = _seconds(wait) if wait else 0.0
    name = checked.cluster_name

    async def work() -> tuple[bool, list[Line]]:
        async with connect(kubeconfig) as client, follow_cluster(Watched(client, namespace), name) as watched:
            shown: dict[str, str] = {}
            final: list[Line] = []

            def lines() -> list[Line]:
                nonlocal final
                final = tree(watched, name)[0]
                return final

            def healthy() -> bool:
                return tree(watched, name)[1]

            if out.is_terminal:
                with Live(_rich_tree(lines()), console=out, auto_refresh=False) as live:

                    def redraw() -> None:
                        live.update(_rich_tree(lines()), refresh=True)

                    done = await watched.until(healthy, timeout, redraw)
            else:

                def print_changes() -> None:
                    for line in lines():
                        if shown.get(line.key) != line.text:
                            shown[line.key] = line.text
                            out.print("  " * line.depth + line.text, markup=False)

                done = await watched.until(healthy, timeout, print_changes)
            return done, final

    done, final = run(work)
    if done:
        out.print(f"cluster {name} is healthy", markup=False)
        return
    first = next((line.text for line in final if not line.ok), "")
    when = f"after {wait}" if wait else "now"
    raise fail(f"cluster {name} is not healthy {when}: {first}")


def _rich_tree(lines: list[Line]) -> Tree:
    root: Tree | None = None
    parents: list[Tree] = []
    for line in lines:
        label = Text(line.text, style="green" if line.ok else "yellow")
        if root is None:
            root = Tree(label)
            parents = [root]
            continue
        parent = parents[min(line.depth, len(parents)) - 1]
        node = parent.add(label)
        parents = [*parents[: line.depth], node]
    return root or Tree("")


@app.command()
def delete(
    file: FileOption,
    wait: Annotated[str, typer.Option("--wait", help="How long to wait for the teardown.")] = "10m",
    namespace: NamespaceOption = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Delete the template's cluster (herder resets its machines and removes its objects) and wait
    until it is gone."""
    checked = _check(file, namespace)
    with one_line_errors(ValueError):
        timeout = _seconds(wait)
    name = checked.cluster_name

    async def work() -> bool:
        async with connect(kubeconfig) as client:
            try:
                await client.delete(CLUSTER, name, namespace)
            except NotFound:
                return False
            out.print(f"deleted cluster/{name}", markup=False)
            async with Watched(client, namespace).follow(CLUSTER, fields=f"metadata.name={name}") as watched:
                last = ""

                def report() -> None:
                    nonlocal last
                    cluster = watched.get(CLUSTER, name)
                    ready = ((cluster.status or {}).get("conditions") or []) if cluster else []
                    message = next((c.get("message", "") for c in ready if c.get("type") == "Ready"), "")
                    if cluster is not None and message and message != last:
                        err.print(f"waiting: {message}", markup=False)
                        last = message

                if not await watched.until(lambda: watched.get(CLUSTER, name) is None, timeout, report):
                    raise UsageFailure(
                        f"timed out after {wait}: cluster {name} is still being torn down: {last}"
                    )
            return True

    with one_line_errors():
        gone = run(work)
    out.print(
        f"cluster {name} is gone" if gone else f"cluster {name} does not exist: nothing to delete",
        markup=False,
    )


@app.command()
def export(
    name: Annotated[str, typer.Argument(help="The cluster's name.")],
    output: Annotated[
        str, typer.Option("--output", "-o", help="File to write; - for standard output.")
    ] = STDOUT,
    namespace: NamespaceOption = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Write a template of a live cluster, such that syncing it back changes nothing."""

    async def work() -> str:
        async with connect(kubeconfig) as client:
            objects = await live_objects(client, name, namespace)
        cluster = next((o for o in objects if o.kind == CLUSTER.kind and o.name == name), None)
        if cluster is None:
            raise UsageFailure(f"cluster {name} does not exist")
        return export_template(cluster, objects)

    with one_line_errors(Unexportable):
        text = run(work)
    if output == STDOUT:
        sys.stdout.write(text)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise fail(f"cannot write {output!r}: {exc.strerror or exc}") from None
    err.print(f"template of cluster {name} written to {output}", markup=False)
