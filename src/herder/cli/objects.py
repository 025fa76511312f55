"""``herder get``, ``apply``, ``delete`` and ``describe``: kubectl's everyday verbs for herder's kinds."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.table import Table

from herder.cli.common import KubeconfigOption, connect, out, run
from herder.cli.errors import fail
from herder.client import Client, Forbidden, NotFound
from herder.resources import KindInfo, Resource
from herder.resources.access import AUDIT_KIND_LABEL, AUDIT_NAME_LABEL, audit_label_value


class Output(StrEnum):
    table = "table"
    yaml = "yaml"
    json = "json"


NamespaceOption = Annotated[str, typer.Option("--namespace", "-n", help="Namespace of namespaced kinds.")]
FileOption = Annotated[
    list[str] | None,
    typer.Option("--filename", "-f", help="A YAML file, a directory of them, or - for stdin."),
]


def age(timestamp: str | None) -> str:
    """A duration as kubectl prints it: 42s, 5m, 3h, 12d."""
    if not timestamp:
        return "<unknown>"
    seconds = int((datetime.now(UTC) - datetime.fromisoformat(timestamp)).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * (2 if unit != "d" else 1):
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def table(
    info: KindInfo, objects: list[Resource], *, with_namespace: bool = False, wide: bool = False
) -> Table:
    """Objects as ``kubectl get`` shows them: name, the kind's printer columns, age."""
    columns = [c for c in info.printer_columns if wide or c.priority == 0]
    grid = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    if with_namespace:
        grid.add_column("NAMESPACE")
    grid.add_column("NAME")
    for column in columns:
        grid.add_column(column.name.upper())
    grid.add_column("AGE")
    for obj in objects:
        data = obj.to_dict()
        row = [_cell(c.value(data)) for c in columns]
        lead = [obj.namespace or ""] if with_namespace else []
        grid.add_row(*lead, obj.name, *row, age(obj.metadata.creation_timestamp))
    return grid


def dump(objects: list[Resource], output: Output, *, single: bool) -> str:
    data: Any = (
        objects[0].to_dict()
        if single
        else {
            "apiVersion": "v1",
            "kind": "List",
            "items": [o.to_dict() for o in objects],
        }
    )
    if output is Output.json:
        return json.dumps(data, indent=2)
    return yaml.safe_dump(data, sort_keys=False).rstrip()


def get(
    kind: Annotated[str, typer.Argument(help="Kind, plural or short name (configpatches, cp, sa…).")],
    name: Annotated[str | None, typer.Argument(help="One object's name.")] = None,
    namespace: NamespaceOption = "default",
    all_namespaces: Annotated[bool, typer.Option("--all-namespaces", "-A")] = False,
    selector: Annotated[str | None, typer.Option("--selector", "-l", help="Label selector.")] = None,
    output: Annotated[Output, typer.Option("--output", "-o")] = Output.table,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="After listing, print changes as they come.")
    ] = False,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """List objects of a kind, or show one."""

    async def work() -> None:
        async with connect(kubeconfig) as client:
            info = client.kind(kind)
            ns = None if all_namespaces or not info.namespaced else namespace
            by_namespace = all_namespaces and info.namespaced
            if name is not None:
                objects = [await client.get(info, name, ns)]
                rv = objects[0].metadata.resource_version
            else:
                listed = await client.list(info, ns, label_selector=selector)
                objects, rv = listed.items, listed.resource_version
            if output is Output.table:
                if objects:
                    out.print(table(info, objects, with_namespace=by_namespace))
                elif not watch:
                    where = f" in {ns} namespace" if ns else ""
                    out.print(f"No {info.plural} found{where}.")
            else:
                out.print(dump(objects, output, single=name is not None), markup=False)
            if not watch:
                return
            field = f"metadata.name={name}" if name else None
            async for event in client.watch(
                info, ns, resource_version=rv or None, label_selector=selector, field_selector=field
            ):
                if event.type == "BOOKMARK":
                    continue
                if output is Output.table:
                    grid = table(info, [event.object], with_namespace=by_namespace)
                    grid.show_header = False
                    out.print(grid)
                else:
                    out.print(
                        dump([event.object], output, single=True) + ("\n---" if output is Output.yaml else "")
                    )

    run(work)


def _documents(sources: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object in the given files, directories (their .yaml, .yml and .json files) or stdin."""
    for source in sources:
        if source == "-":
            texts = [("<stdin>", sys.stdin.read())]
        else:
            path = Path(source)
            files = (
                sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml", ".json"))
                if path.is_dir()
                else [path]
            )
            texts = [(str(f), f.read_text()) for f in files]
        for where, text in texts:
            for doc in yaml.safe_load_all(text):
                if doc is None:
                    continue
                if not isinstance(doc, dict):
                    raise ValueError(f"{where}: every document must be an object")
                if doc.get("kind") == "List":
                    for item in doc.get("items") or []:
                        yield where, item
                else:
                    yield where, doc


def _load(files: list[str] | None, namespace: str, client: Client) -> list[tuple[KindInfo, Resource]]:
    if not files:
        raise fail("-f FILE is required (a file, a directory, or - for stdin)")
    loaded = []
    for where, doc in _documents(files):
        obj = Resource.from_dict(doc)
        info = client.registry.for_object(obj)
        if info.namespaced and not obj.metadata.namespace:
            obj.metadata.namespace = namespace
        if not obj.name:
            raise ValueError(f"{where}: {info.kind} without metadata.name")
        loaded.append((info, obj))
    return loaded


def apply(
    filename: FileOption = None,
    namespace: NamespaceOption = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Create objects from YAML, or update those that exist (a merge of the manifest onto them)."""

    async def work() -> None:
        async with connect(kubeconfig) as client:
            for info, obj in _load(filename, namespace, client):
                ref = f"{info.singular}/{obj.name}"
                try:
                    current = await client.get(info, obj.name, obj.namespace)
                except NotFound:
                    await client.create(obj)
                    out.print(f"{ref} created", markup=False)
                    continue
                manifest = obj.to_dict()
                manifest.pop("status", None)
                manifest["metadata"].pop("resourceVersion", None)
                changed = await client.patch(info, obj.name, manifest, obj.namespace)
                same = changed.metadata.resource_version == current.metadata.resource_version
                out.print(f"{ref} {'unchanged' if same else 'configured'}", markup=False)

    run(work)


def delete(
    kind: Annotated[str | None, typer.Argument(help="Kind, plural or short name.")] = None,
    name: Annotated[str | None, typer.Argument(help="The object's name.")] = None,
    filename: FileOption = None,
    namespace: NamespaceOption = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Delete one object (KIND NAME), or the objects of -f FILE."""

    async def work() -> None:
        async with connect(kubeconfig) as client:
            if filename:
                targets = [
                    (info, obj.name, obj.namespace) for info, obj in _load(filename, namespace, client)
                ]
            elif kind and name:
                info = client.kind(kind)
                targets = [(info, name, namespace if info.namespaced else None)]
            else:
                raise fail("name what to delete: KIND NAME, or -f FILE")
            for info, obj_name, ns in targets:
                marked = await client.delete(info, obj_name, ns)
                state = "marked for deletion (finalizers pending)" if marked else "deleted"
                out.print(f"{info.singular}/{obj_name} {state}", markup=False)

    run(work)


def _section(title: str, data: Any) -> None:
    if not data:
        return
    out.print(f"[bold]{title}:[/bold]")
    out.print("  " + yaml.safe_dump(data, sort_keys=False).rstrip().replace("\n", "\n  "), markup=False)


def describe(
    kind: Annotated[str, typer.Argument(help="Kind, plural or short name.")],
    name: Annotated[str, typer.Argument(help="The object's name.")],
    namespace: NamespaceOption = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Show one object: metadata, spec, status, conditions, and its recent audit events."""

    async def work() -> None:
        async with connect(kubeconfig) as client:
            info = client.kind(kind)
            obj = await client.get(info, name, namespace if info.namespaced else None)
            meta = obj.metadata
            head = Table.grid(padding=(0, 2))
            for label, value in (
                ("Name", obj.name),
                ("Namespace", obj.namespace),
                ("Kind", f"{info.kind} ({info.api_version})"),
                ("Created", f"{meta.creation_timestamp} ({age(meta.creation_timestamp)} ago)"),
                ("Deleting since", meta.deletion_timestamp),
                ("Generation", str(meta.generation)),
                ("Owner", f"{ref.kind}/{ref.name}" if (ref := meta.controller_ref()) else None),
            ):
                if value:
                    head.add_row(f"{label}:", value)
            out.print(head)
            _section("Labels", meta.labels)
            _section("Annotations", meta.annotations)
            _section("Finalizers", meta.finalizers)
            _section("Spec", obj.spec)
            status = dict(obj.status or {})
            conditions = status.pop("conditions", None) or []
            _section("Status", status)
            if conditions:
                grid = Table("TYPE", "STATUS", "REASON", "MESSAGE", "AGE", box=None, header_style="bold")
                for c in conditions:
                    since = age(c.get("lastTransitionTime"))
                    grid.add_row(
                        c.get("type", ""),
                        c.get("status", ""),
                        c.get("reason", ""),
                        c.get("message", ""),
                        since,
                    )
                out.print("[bold]Conditions:[/bold]")
                out.print(grid)
            await _recent_audit(client, info, obj)

    run(work)


async def _recent_audit(client: Client, info: KindInfo, obj: Resource, limit: int = 10) -> None:
    selector = f"{AUDIT_KIND_LABEL}={info.kind}"
    if (name := audit_label_value(obj.name)) is not None:
        selector += f",{AUDIT_NAME_LABEL}={name}"
    try:
        events = (await client.list("auditevents", label_selector=selector)).items
    except Forbidden:
        out.print("[bold]Audit events:[/bold] (readable by Admin only)")
        return
    events = [e for e in events if (e.spec or {}).get("namespace", "") == (obj.namespace or "")][-limit:]
    if not events:
        return
    grid = Table("TIME", "USER", "VERB", "CODE", box=None, header_style="bold")
    for e in events:
        spec = e.spec or {}
        grid.add_row(
            spec.get("time", ""), spec.get("user", ""), spec.get("verb", ""), str(spec.get("code", ""))
        )
    out.print("[bold]Audit events:[/bold]")
    out.print(grid)
