"""``herder jointoken``: create (printing the token once), list and revoke the tokens that let machines
join herder over SideroLink."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer
from rich.table import Table

from herder.cli.common import KubeconfigOption, connect, err, out, run
from herder.cli.errors import fail
from herder.cli.objects import age
from herder.resources import Resource
from herder.resources.join import JOIN_TOKEN, JoinTokenSpec, JoinTokenStatus
from herder.resources.status import status_of
from herder.siderolink import tokens

app = typer.Typer(help="Join tokens: what lets machines join herder over SideroLink.", no_args_is_help=True)

_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def _expiry(text: str) -> str:
    match = _DURATION.match(text)
    if match is None or int(match.group(1)) == 0:
        raise fail(f"--expires-in {text!r}: expected a duration such as 30m, 12h or 7d")
    at = datetime.now(UTC) + timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    return (at.replace(microsecond=0) + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


@app.command()
def create(
    name: Annotated[str, typer.Argument(help="The token's name (what revoke and the audit log call it).")],
    description: Annotated[str, typer.Option("--description")] = "",
    expires_in: Annotated[
        str | None,
        typer.Option(
            "--expires-in", help="How long it lets machines join: 30m, 12h, 7d (default: until revoked)."
        ),
    ] = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Create a join token and print it on stdout: it is shown this once only (herder keeps its digest)."""
    made = tokens.make(name)
    spec: dict[str, object] = {"description": description, "digest": made.digest}
    if expires_in is not None:
        spec["expiresAt"] = _expiry(expires_in)

    async def work() -> None:
        async with connect(kubeconfig) as client:
            await client.create(
                Resource.model_validate(
                    {
                        "apiVersion": JOIN_TOKEN.api_version,
                        "kind": JOIN_TOKEN.kind,
                        "metadata": {"name": name},
                        "spec": spec,
                    }
                )
            )

    run(work)
    err.print(
        f"jointoken/{name} created; the token follows, shown this once only (kernel argument: "
        "siderolink.api=grpc://HOST:PORT?jointoken=TOKEN)",
        markup=False,
    )
    out.print(made.token, markup=False)


@app.command("list")
def list_tokens(kubeconfig: KubeconfigOption = None) -> None:
    """List join tokens: whether each still lets machines join, and how often one did."""

    async def work() -> None:
        async with connect(kubeconfig) as client:
            items = (await client.list(JOIN_TOKEN)).items
        now = datetime.now(UTC)
        grid = Table(
            "NAME", "STATE", "EXPIRES", "JOINS", "LAST-USED", "AGE", "DESCRIPTION",
            box=None, header_style="bold", pad_edge=False,
        )  # fmt: skip
        for item in items:
            spec = JOIN_TOKEN.spec_of(item, JoinTokenSpec)
            status = status_of(item, JoinTokenStatus)
            state = "revoked" if spec.revoked else "expired" if tokens.expired(spec, now) else "valid"
            grid.add_row(
                item.name,
                state,
                spec.expires_at or "never",
                str(status.joins),
                status.last_used or "-",
                age(item.metadata.creation_timestamp),
                spec.description,
            )
        out.print(grid)

    run(work)


@app.command()
def revoke(
    name: Annotated[str, typer.Argument(help="The token's name.")],
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Revoke a join token: no machine joins with it any more (machines that joined stay joined)."""

    async def work() -> None:
        async with connect(kubeconfig) as client:
            current = await client.get(JOIN_TOKEN, name)
            current.spec = {**(current.spec or {}), "revoked": True}
            await client.update(current)

    run(work)
    out.print(f"jointoken/{name} revoked", markup=False)
