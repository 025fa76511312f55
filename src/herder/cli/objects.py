"""``herder get``, ``apply``, ``delete`` and ``describe``: kubectl's everyday verbs for herder's kinds.

They speak to the server through the light synchronous client (``herder.client.rest``), as kubectl does:
kinds found through discovery, tables as the server renders them, objects as JSON documents. So they
answer at once, without loading the async client or the kinds' models.
"""

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

from herder.cli.errors import fail
from herder.cli.kubeconfigs import KubeconfigOption
from herder.cli.quick import connect_rest, one_line_failures
from herder.cli.text import columns
from herder.client.errors import Forbidden, NotFound
from herder.client.rest import MERGE_PATCH, TABLE, Kind, Rest
from herder.resources.audit_labels import AUDIT_KIND_LABEL, AUDIT_NAME_LABEL, audit_label_value


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


def table_rows(table: dict[str, Any], *, with_namespace: bool) -> tuple[list[str], list[list[str]]]:
    """A server's Table as kubectl prints it: its columns of priority 0, the namespace first with ``-A``."""
    shown = [i for i, c in enumerate(table.get("columnDefinitions") or []) if c.get("priority", 0) == 0]
    definitions = table.get("columnDefinitions") or []
    header = (["NAMESPACE"] if with_namespace else []) + [definitions[i]["name"].upper() for i in shown]
    rows = []
    for row in table.get("rows") or []:
        cells = row.get("cells") or []
        lead = (
            [((row.get("object") or {}).get("metadata") or {}).get("namespace", "")] if with_namespace else []
        )
        rows.append(lead + [_cell(cells[i]) if i < len(cells) else "" for i in shown])
    return header, rows


def dump(objects: list[dict[str, Any]], output: Output, *, single: bool) -> str:
    data: Any = objects[0] if single else {"apiVersion": "v1", "kind": "List", "items": objects}
    if output is Output.json:
        return json.dumps(data, indent=2)
    return yaml.safe_dump(data, sort_keys=False).rstrip()


def _with_kind(kind: Kind, item: dict[str, Any]) -> dict[str, Any]:
    # List items may omit apiVersion and kind, as in Kubernetes.
    return {"apiVersion": kind.api_version, "kind": kind.kind, **item}


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
    with one_line_failures(), connect_rest(kubeconfig) as rest:
        found = rest.kind(kind)
        ns = None if all_namespaces or not found.namespaced else namespace
        by_namespace = all_namespaces and found.namespaced
        params = {"labelSelector": selector} if selector else {}
        accept = TABLE if output is Output.table else "application/json"
        answer = rest.request("GET", found.path(ns, name), params=params, accept=accept)
        rv = str((answer.get("metadata") or {}).get("resourceVersion") or "")
        if output is Output.table:
            header, rows = table_rows(answer, with_namespace=by_namespace)
            if rows:
                typer.echo(columns(rows, header))
            elif not watch:
                where = f" in {ns} namespace" if ns else ""
                typer.echo(f"No {found.plural} found{where}.")
        elif name is not None:
            typer.echo(dump([answer], output, single=True))
        else:
            items = [_with_kind(found, item) for item in answer.get("items") or []]
            typer.echo(dump(items, output, single=False))
        if not watch:
            return
        watched = {"resourceVersion": rv, "allowWatchBookmarks": "true", **params}
        if name is not None:
            watched["fieldSelector"] = f"metadata.name={name}"
        for event in rest.stream(found.path(ns), watched, accept=accept):
            if event.get("type") in ("BOOKMARK", "ERROR"):
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise fail(str(status.get("message") or "the watch ended with an error"))
                continue
            shown = event.get("object") or {}
            if output is Output.table:
                typer.echo(columns(table_rows(shown, with_namespace=by_namespace)[1]))
            else:
                text = dump([shown], output, single=True)
                typer.echo(text + ("\n---" if output is Output.yaml else ""))


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


def _load(files: list[str] | None, namespace: str, rest: Rest) -> list[tuple[Kind, dict[str, Any]]]:
    """The documents of ``files``, each with its kind and namespace."""
    if not files:
        raise fail("-f FILE is required (a file, a directory, or - for stdin)")
    loaded = []
    for where, doc in _documents(files):
        if not isinstance(doc.get("apiVersion"), str) or not isinstance(doc.get("kind"), str):
            raise ValueError(f"{where}: a document without apiVersion and kind")
        found = rest.kind_of(doc["apiVersion"], doc["kind"])
        metadata = doc.get("metadata")
        if not isinstance(metadata, dict) or not metadata.get("name"):
            raise ValueError(f"{where}: {found.kind} without metadata.name")
        if found.namespaced and not metadata.get("namespace"):
            metadata["namespace"] = namespace
        loaded.append((found, doc))
    return loaded


def apply(
    filename: FileOption = None,
    namespace: NamespaceOption = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Create objects from YAML, or update those that exist (a merge of the manifest onto them)."""
    with one_line_failures(), connect_rest(kubeconfig) as rest:
        for found, doc in _load(filename, namespace, rest):
            meta = doc["metadata"]
            ref, ns = f"{found.singular}/{meta['name']}", meta.get("namespace")
            try:
                current = rest.request("GET", found.path(ns, meta["name"]))
            except NotFound:
                rest.request("POST", found.path(ns), body=doc)
                typer.echo(f"{ref} created")
                continue
            manifest = {**doc, "metadata": {k: v for k, v in meta.items() if k != "resourceVersion"}}
            manifest.pop("status", None)
            changed = rest.request(
                "PATCH", found.path(ns, meta["name"]), body=manifest, content_type=MERGE_PATCH
            )
            same = _version(changed) == _version(current)
            typer.echo(f"{ref} {'unchanged' if same else 'configured'}")


def _version(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def delete(
    kind: Annotated[str | None, typer.Argument(help="Kind, plural or short name.")] = None,
    name: Annotated[str | None, typer.Argument(help="The object's name.")] = None,
    filename: FileOption = None,
    namespace: NamespaceOption = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Delete one object (KIND NAME), or the objects of -f FILE."""
    with one_line_failures(), connect_rest(kubeconfig) as rest:
        if filename:
            targets = [
                (found, doc["metadata"]["name"], doc["metadata"].get("namespace"))
                for found, doc in _load(filename, namespace, rest)
            ]
        elif kind and name:
            found = rest.kind(kind)
            targets = [(found, name, namespace if found.namespaced else None)]
        else:
            raise fail("name what to delete: KIND NAME, or -f FILE")
        for found, obj_name, ns in targets:
            answer = rest.request("DELETE", found.path(ns, obj_name))
            # An object finalizers hold comes back marked for deletion; one gone comes back as a Status.
            marked = answer.get("kind") == found.kind and (answer.get("metadata") or {}).get(
                "deletionTimestamp"
            )
            state = "marked for deletion (finalizers pending)" if marked else "deleted"
            typer.echo(f"{found.singular}/{obj_name} {state}")


def _section(title: str, data: Any) -> None:
    if not data:
        return
    typer.echo(f"{title}:")
    typer.echo("  " + yaml.safe_dump(data, sort_keys=False).rstrip().replace("\n", "\n  "))


def describe(
    kind: Annotated[str, typer.Argument(help="Kind, plural or short name.")],
    name: Annotated[str, typer.Argument(help="The object's name.")],
    namespace: NamespaceOption = "default",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Show one object: metadata, spec, status, conditions, and its recent audit events."""
    with one_line_failures(), connect_rest(kubeconfig) as rest:
        found = rest.kind(kind)
        obj = rest.request("GET", found.path(namespace if found.namespaced else None, name))
        meta = obj.get("metadata") or {}
        owner = next((r for r in meta.get("ownerReferences") or () if r.get("controller")), None)
        created = meta.get("creationTimestamp")
        head = [
            (label, value)
            for label, value in (
                ("Name", meta.get("name")),
                ("Namespace", meta.get("namespace")),
                ("Kind", f"{found.kind} ({found.api_version})"),
                ("Created", f"{created} ({age(created)} ago)" if created else None),
                ("Deleting since", meta.get("deletionTimestamp")),
                ("Generation", str(meta.get("generation") or "")),
                ("Owner", f"{owner['kind']}/{owner['name']}" if owner else None),
            )
            if value
        ]
        typer.echo(columns([(f"{label}:", str(value)) for label, value in head]))
        _section("Labels", meta.get("labels"))
        _section("Annotations", meta.get("annotations"))
        _section("Finalizers", meta.get("finalizers"))
        _section("Spec", obj.get("spec"))
        status = dict(obj.get("status") or {})
        conditions = status.pop("conditions", None) or []
        _section("Status", status)
        if conditions:
            typer.echo("Conditions:")
            rows = [
                [c.get(f, "") for f in ("type", "status", "reason", "message")]
                + [age(c.get("lastTransitionTime"))]
                for c in conditions
            ]
            typer.echo(columns(rows, ["TYPE", "STATUS", "REASON", "MESSAGE", "AGE"], indent="  "))
        _recent_audit(rest, found, obj)


def _recent_audit(rest: Rest, found: Kind, obj: dict[str, Any], limit: int = 10) -> None:
    meta = obj.get("metadata") or {}
    selector = f"{AUDIT_KIND_LABEL}={found.kind}"
    if (name := audit_label_value(str(meta.get("name", "")))) is not None:
        selector += f",{AUDIT_NAME_LABEL}={name}"
    try:
        events = rest.request("GET", rest.kind("auditevents").path(), params={"labelSelector": selector})
    except Forbidden:
        typer.echo("Audit events: (readable by Admin only)")
        return
    specs = [e.get("spec") or {} for e in events.get("items") or []]
    specs = [s for s in specs if s.get("namespace", "") == (meta.get("namespace") or "")][-limit:]
    if not specs:
        return
    typer.echo("Audit events:")
    rows = [[s.get("time", ""), s.get("user", ""), s.get("verb", ""), str(s.get("code", ""))] for s in specs]
    typer.echo(columns(rows, ["TIME", "USER", "VERB", "CODE"], indent="  "))
