"""``herder audit``: the most recent audit events, filtered by user, kind, object or verb."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from herder.cli.common import KubeconfigOption, connect, out, run
from herder.cli.errors import fail
from herder.cli.objects import Output, dump
from herder.resources import Resource
from herder.resources.access import AUDIT_EVENT
from herder.resources.audit_labels import (
    AUDIT_KIND_LABEL,
    AUDIT_NAME_LABEL,
    AUDIT_USER_LABEL,
    AUDIT_VERB_LABEL,
    audit_label_value,
)


def audit_events(
    user: Annotated[str | None, typer.Option("--user", help="As recorded, e.g. serviceaccount:ci.")] = None,
    kind: Annotated[str | None, typer.Option("--kind", help="The kind acted on, e.g. ConfigPatch.")] = None,
    name: Annotated[str | None, typer.Option("--name", help="The object acted on.")] = None,
    verb: Annotated[str | None, typer.Option("--verb", help="create, update, patch, delete, get…")] = None,
    failed: Annotated[bool, typer.Option("--failed", help="Only refused or failed requests.")] = False,
    limit: Annotated[int, typer.Option("--limit", help="How many of the most recent events.")] = 50,
    output: Annotated[Output, typer.Option("--output", "-o")] = Output.table,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Show recent audit events (readable by Admin and Support)."""
    selector = []
    for label, value in (
        (AUDIT_USER_LABEL, user),
        (AUDIT_KIND_LABEL, kind),
        (AUDIT_NAME_LABEL, name),
        (AUDIT_VERB_LABEL, verb),
    ):
        if value is None:
            continue
        as_label = audit_label_value(value)
        if as_label is None:
            raise fail(f"{value!r} cannot be filtered on")
        selector.append(f"{label}={as_label}")

    async def work() -> None:
        async with connect(kubeconfig) as client:
            events = (await client.list(AUDIT_EVENT, label_selector=",".join(selector) or None)).items
        if failed:
            events = [e for e in events if (e.spec or {}).get("result") == "Failure"]
        events = events[-limit:] if limit > 0 else events
        if output is not Output.table:
            out.print(dump([e.to_dict() for e in events], output, single=False), markup=False)
        elif events:
            out.print(_table(events))
        else:
            out.print("No audit events found.")

    run(work)


def _table(events: list[Resource]) -> Table:
    grid = Table(
        "TIME",
        "USER",
        "ROLE",
        "VERB",
        "OBJECT",
        "CODE",
        "FROM",
        box=None,
        header_style="bold",
        pad_edge=False,
    )
    for event in events:
        spec = event.spec or {}
        target = "/".join(p for p in (spec.get("namespace"), spec.get("name")) if p)
        what = f"{spec.get('kind', '')}{'/' + spec['subresource'] if spec.get('subresource') else ''}"
        user = spec.get("user") or "(unauthenticated)"
        if spec.get("impersonator"):
            user += f" (by {spec['impersonator']})"
        grid.add_row(
            spec.get("time", "")[:19].replace("T", " "),
            user,
            spec.get("role", ""),
            spec.get("verb", ""),
            f"{what} {target}".strip(),
            str(spec.get("code", "")),
            spec.get("sourceAddress", ""),
        )
    return grid
