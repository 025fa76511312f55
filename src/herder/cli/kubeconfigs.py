"""Where a command finds its server: ``--kubeconfig``, then ``$HERDER_KUBECONFIG``, then ``$KUBECONFIG``,
then the default data dir's admin kubeconfig. Light enough for every command to import."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from herder.api.datadir import KUBECONFIG, default_data_dir
from herder.cli.errors import fail
from herder.client.config_home import login_kubeconfig

KubeconfigOption = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        help="Kubeconfig of the server (default: $HERDER_KUBECONFIG, then $KUBECONFIG, then the one herder login wrote, then the default "
        "data dir's admin.kubeconfig).",
        show_default=False,
    ),
]
ProviderKubeconfigOption = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        help="The provider's kubeconfig (default: $HERDER_KUBECONFIG, then $KUBECONFIG).",
        show_default=False,
    ),
]


def kubeconfig_path(given: Path | None, *, admin_default: bool = True) -> Path:
    """``--kubeconfig``, else ``$HERDER_KUBECONFIG``, else ``$KUBECONFIG`` (as kubectl users set it; of a
    list of files, the first that exists), else the kubeconfig ``herder login`` wrote when there is one,
    else (with ``admin_default``) the admin kubeconfig of the default data dir."""
    if given is not None:
        return given
    env = os.environ.get("HERDER_KUBECONFIG")
    if env:
        return Path(env)
    listed = [Path(p) for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        return next((p for p in listed if p.is_file()), listed[0])
    signed_in = login_kubeconfig()
    if signed_in.exists():
        return signed_in
    if not admin_default:
        raise fail("give --kubeconfig (or set $HERDER_KUBECONFIG or $KUBECONFIG, or run herder login)")
    return default_data_dir() / KUBECONFIG
