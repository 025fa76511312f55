"""``herder access``: what herder's AccessPolicy gives you, or (Admin) anyone, on each cluster.

``show`` prints your own role, the policy's rules that name you, and your role and Kubernetes groups on
every cluster you see; ``check --user NAME [--cluster C]`` prints the same for another identity, as the
policy evaluates it now (for a person the policy names by email, too, before they ever signed in).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.table import Table

from herder.cli.common import KubeconfigOption, connect, out, run

app = typer.Typer(help="What the access policy gives you, or anyone, on each cluster.", no_args_is_help=True)
OutputOption = Annotated[str, typer.Option("--output", "-o", help="table, yaml or json.")]


def _print(view: dict[str, Any], output: str) -> None:
    if output in ("yaml", "json"):
        text = yaml.safe_dump(view, sort_keys=False) if output == "yaml" else json.dumps(view, indent=2)
        out.print(text, markup=False)
        return
    labels = ",".join(f"{k}={v}" for k, v in sorted(view.get("labels", {}).items()))
    out.print(
        f"user: {view['user']}  role: {view['role']}" + (f"  labels: {labels}" if labels else ""),
        markup=False,
    )
    table = Table("CLUSTER", "ROLE", "KUBERNETES GROUPS", box=None)
    for cluster in view["clusters"]:
        table.add_row(
            cluster["name"], cluster["role"], ", ".join(cluster["kubernetesGroups"]) or "(no access)"
        )
    out.print(table)
    if view["rules"]:
        out.print("rules naming this identity:", markup=False)
        out.print(yaml.safe_dump(view["rules"], sort_keys=False).rstrip(), markup=False)


def _fetch(kubeconfig: Path | None, user: str | None, cluster: str | None) -> dict[str, Any]:
    async def work() -> dict[str, Any]:
        async with connect(kubeconfig) as client:
            return await client.access(user, cluster)

    return run(work)


@app.command()
def show(output: OutputOption = "table", kubeconfig: KubeconfigOption = None) -> None:
    """Your role, the rules naming you, and your role and Kubernetes groups on each cluster you see."""
    _print(_fetch(kubeconfig, None, None), output)


@app.command()
def check(
    user: Annotated[str, typer.Option("--user", help="serviceaccount:NAME, user:NAME or a person's email.")],
    cluster: Annotated[str | None, typer.Option("--cluster", help="Only this cluster.")] = None,
    output: OutputOption = "table",
    kubeconfig: KubeconfigOption = None,
) -> None:
    """The effective role and Kubernetes groups of ``--user`` on each cluster, or on ``--cluster`` (Admin)."""
    _print(_fetch(kubeconfig, user, cluster), output)
