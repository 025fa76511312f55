"""What every API command of the CLI shares: finding the server, running async code, one-line errors."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console

from herder.cli.errors import fail
from herder.cli.kubeconfigs import KubeconfigOption, ProviderKubeconfigOption, kubeconfig_path
from herder.cli.quick import one_line_failures
from herder.client import Client
from herder.resources import UnknownKind

__all__ = ["KubeconfigOption", "ProviderKubeconfigOption", "connect", "err", "kubeconfig_path", "out", "run"]

T = TypeVar("T")

# Piped output is not cut to 80 columns: scripts and tests read whole rows.
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 400)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def connect(kubeconfig: Path | None) -> Client:
    return Client.from_kubeconfig(kubeconfig_path(kubeconfig))


def run(work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run an async command body; every expected failure becomes one line on stderr and exit code 1."""
    with one_line_failures():
        try:
            return asyncio.run(work())
        except UnknownKind as exc:
            raise fail(str(exc)) from None
