"""What every API command of the CLI shares: finding the server, running async code, one-line errors."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
import yaml
from rich.console import Console

from herder.api.datadir import KUBECONFIG, default_data_dir
from herder.cli.errors import fail
from herder.client import ApiError, Client, KubeconfigError, TransportError
from herder.client.kubeconfig import login_kubeconfig
from herder.resources import InvalidObject, UnknownKind

T = TypeVar("T")

# Piped output is not cut to 80 columns: scripts and tests read whole rows.
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 400)
err = Console(stderr=True, highlight=False, soft_wrap=True)

KubeconfigOption = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        help="Kubeconfig of the server (default: $HERDER_KUBECONFIG, then the one herder login wrote, then the default data dir's admin.kubeconfig).",
        show_default=False,
    ),
]


def kubeconfig_path(given: Path | None) -> Path:
    """``--kubeconfig``, else ``$HERDER_KUBECONFIG``, else the kubeconfig ``herder login`` wrote, else the
    admin kubeconfig of the default data dir."""
    if given is not None:
        return given
    env = os.environ.get("HERDER_KUBECONFIG")
    if env:
        return Path(env)
    signed_in = login_kubeconfig()
    return signed_in if signed_in.exists() else default_data_dir() / KUBECONFIG


def connect(kubeconfig: Path | None) -> Client:
    return Client.from_kubeconfig(kubeconfig_path(kubeconfig))


def run(work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run an async command body; every expected failure becomes one line on stderr and exit code 1."""
    try:
        return asyncio.run(work())
    except ApiError as exc:
        raise fail(f"{exc.reason or exc.code}: {exc.message}") from None
    except (TransportError, KubeconfigError, UnknownKind, InvalidObject, ValueError) as exc:
        raise fail(str(exc)) from None
    except yaml.YAMLError as exc:
        raise fail(f"invalid YAML: {exc}") from None
    except OSError as exc:
        raise fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": ")) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
