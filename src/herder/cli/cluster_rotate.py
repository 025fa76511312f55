"""``herder cluster rotate``: rotate a cluster's Talos API CA or Kubernetes CA without downtime (asked for
on ``Cluster.spec.secretsRotation`` with a new generation, carried out by herder's rotation controller),
following its phases until it is done."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from herder.cli.errors import fail
from herder.cli.kubeconfigs import KubeconfigOption
from herder.cli.quick import connect_rest, one_line_failures
from herder.client.rest import MERGE_PATCH


def rotate(
    name: Annotated[str, typer.Argument(help="The cluster's name.")],
    talos_ca: Annotated[bool, typer.Option("--talos-ca", help="Rotate the Talos API CA.")] = False,
    kubernetes_ca: Annotated[bool, typer.Option("--kubernetes-ca", help="Rotate the Kubernetes CA.")] = False,
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="Namespace of the cluster.")
    ] = "default",
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Follow the rotation until it is done.")
    ] = True,
    timeout: Annotated[int, typer.Option("--timeout", help="Seconds to follow it.", min=1)] = 900,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Rotate the cluster's Talos API CA or Kubernetes CA without downtime.

    As talosctl rotate-ca does it (Operator on the cluster): a new CA is accepted by every machine, becomes
    the issuing one, herder's credentials are re-issued, and the old CA is dropped. Credentials of the old
    CA stop working."""
    if talos_ca == kubernetes_ca:
        raise fail("name one CA to rotate: --talos-ca or --kubernetes-ca")
    component = "TalosCA" if talos_ca else "KubernetesCA"
    with one_line_failures(), connect_rest(kubeconfig) as rest:
        path = rest.kind("clusters").path(namespace, name)
        cluster = rest.request("GET", path)
        generation = _generation(cluster) + 1
        patch = {"spec": {"secretsRotation": {"component": component, "generation": generation}}}
        rest.request("PATCH", path, body=patch, content_type=MERGE_PATCH)
        typer.echo(f"rotation {generation} of the {component} of cluster {name} asked for", err=True)
        if wait:
            _follow(rest.request, path, generation, timeout)


def _generation(cluster: dict[str, Any]) -> int:
    asked = ((cluster.get("spec") or {}).get("secretsRotation") or {}).get("generation") or 0
    seen = ((cluster.get("status") or {}).get("secretsRotation") or {}).get("generation") or 0
    return max(int(asked), int(seen))


def _follow(get: Any, path: str, generation: int, timeout: int) -> None:
    deadline = time.monotonic() + timeout
    shown = ("", "")
    while time.monotonic() < deadline:
        rotation = ((get("GET", path).get("status") or {}).get("secretsRotation")) or {}
        if int(rotation.get("generation") or 0) == generation:
            now = (str(rotation.get("phase") or ""), str(rotation.get("lastError") or ""))
            if now != shown:
                typer.echo(f"{now[0]}{': ' + now[1] if now[1] else ''}", err=True)
                shown = now
            if now[0] == "Done":
                return
        time.sleep(0.5)
    raise fail(f"the rotation is not done within {timeout}s (it goes on): phase {shown[0] or 'not started'}")
