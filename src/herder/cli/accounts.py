"""``herder serviceaccount``: create (printing its token once), list and delete service accounts."""

from __future__ import annotations

import contextlib
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from herder.api.datadir import write_kubeconfig
from herder.cli.common import KubeconfigOption, connect, err, kubeconfig_path, out, run
from herder.cli.errors import fail
from herder.cli.objects import age
from herder.client import IssuedToken, NotFound
from herder.client.kubeconfig import load
from herder.resources import Resource
from herder.resources.access import ROLES, SERVICE_ACCOUNT, TOKEN_SUBJECT_LABEL

app = typer.Typer(
    help="Service accounts: identities with a role, for scripts and providers.", no_args_is_help=True
)


ExpiresOption = Annotated[
    int | None, typer.Option("--expires-in", help="Seconds until the token expires (default: never).")
]
WriteKubeconfigOption = Annotated[
    Path | None,
    typer.Option("--write-kubeconfig", help="Also write a kubeconfig (mode 0600) holding the token."),
]


@app.command()
def create(
    name: Annotated[str, typer.Argument(help="The account's name.")],
    role: Annotated[str, typer.Option("--role", help=f"One of {', '.join(ROLES)}.")],
    provider_id: Annotated[
        str | None, typer.Option("--provider-id", help="The infra provider id (role InfraProvider).")
    ] = None,
    description: Annotated[str, typer.Option("--description")] = "",
    expires_in: ExpiresOption = None,
    write_to: WriteKubeconfigOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Create a service account and print its bearer token on stdout: it is shown this once only."""

    async def work() -> IssuedToken:
        async with connect(kubeconfig) as client:
            spec = {"role": role, "description": description}
            if provider_id:
                spec["providerId"] = provider_id
            await client.create(
                Resource.model_validate(
                    {
                        "apiVersion": SERVICE_ACCOUNT.api_version,
                        "kind": SERVICE_ACCOUNT.kind,
                        "metadata": {"name": name},
                        "spec": spec,
                    }
                )
            )
            return await client.issue_token(SERVICE_ACCOUNT, name, expires_in_seconds=expires_in)

    _hand_out(run(work), f"serviceaccount/{name} created", write_to, kubeconfig)


@app.command()
def token(
    name: Annotated[str, typer.Argument(help="The account's name.")],
    expires_in: ExpiresOption = None,
    write_to: WriteKubeconfigOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Issue another token for a service account (to rotate: issue, switch, then delete the old one)."""

    async def work() -> IssuedToken:
        async with connect(kubeconfig) as client:
            return await client.issue_token(SERVICE_ACCOUNT, name, expires_in_seconds=expires_in)

    _hand_out(run(work), f"serviceaccount/{name}: token issued", write_to, kubeconfig)


def _hand_out(issued: IssuedToken, what: str, write_to: Path | None, kubeconfig: Path | None) -> None:
    """The token on stdout (so that scripts can capture it), everything else on stderr."""
    err.print(f"{what} (token {issued.name}); the token follows, shown this once only", markup=False)
    # The token first: whatever fails next, it must not be lost.
    out.print(issued.token, markup=False)
    if write_to is not None:
        credentials = load(kubeconfig_path(kubeconfig))
        try:
            write_kubeconfig(write_to, credentials.server, credentials.ca_pem, issued.token)
        except OSError as exc:
            raise fail(f"cannot write {write_to}: {exc.strerror}") from None
        err.print(f"kubeconfig written to {write_to}", markup=False)


@app.command("list")
def list_accounts(kubeconfig: KubeconfigOption = None) -> None:
    """List service accounts with their role and number of live tokens."""

    async def work() -> None:
        async with connect(kubeconfig) as client:
            accounts = (await client.list(SERVICE_ACCOUNT)).items
            tokens = (await client.list("tokens")).items
        counts = Counter(
            (t.spec or {}).get("subject")
            for t in tokens
            if (t.spec or {}).get("subjectKind") == SERVICE_ACCOUNT.kind
        )
        grid = Table(
            "NAME", "ROLE", "PROVIDER", "TOKENS", "AGE", box=None, header_style="bold", pad_edge=False
        )
        for sa in accounts:
            spec = sa.spec or {}
            grid.add_row(
                sa.name,
                spec.get("role", ""),
                spec.get("providerId") or "",
                str(counts[sa.name]),
                age(sa.metadata.creation_timestamp),
            )
        out.print(grid)

    run(work)


@app.command()
def delete(
    name: Annotated[str, typer.Argument(help="The account's name.")],
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Delete a service account and revoke its tokens."""

    async def work() -> None:
        async with connect(kubeconfig) as client:
            listed = await client.list("tokens", label_selector=f"{TOKEN_SUBJECT_LABEL}={name}")
            tokens = [t for t in listed.items if (t.spec or {}).get("subjectKind") == SERVICE_ACCOUNT.kind]
            await client.delete(SERVICE_ACCOUNT, name)
            # Deleting the account already makes its tokens useless; deleting them keeps the list honest.
            for token in tokens:
                with contextlib.suppress(NotFound):
                    await client.delete("tokens", token.name)
        out.print(f"serviceaccount/{name} deleted ({len(tokens)} token(s) revoked)", markup=False)

    run(work)
