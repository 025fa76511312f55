"""What the everyday commands share (``get``, ``describe``, ``apply``, ``delete``, ``cluster kubeconfig``):
a light synchronous connection to the server (``herder.client.rest``) and one-line errors, without the
async client, the kinds' models or rich, so that they answer at once."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
import yaml

from herder.cli.errors import fail
from herder.cli.kubeconfigs import kubeconfig_path
from herder.client.errors import ApiError, TransportError
from herder.client.kubeconfig import KubeconfigError, load
from herder.client.rest import Rest


@contextmanager
def one_line_failures() -> Iterator[None]:
    """Every expected failure of a command's body as one line on stderr and exit code 1."""
    try:
        yield
    except ApiError as exc:
        raise fail(f"{exc.reason or exc.code}: {exc.message}") from None
    except (TransportError, KubeconfigError, ValueError) as exc:
        raise fail(str(exc)) from None
    except yaml.YAMLError as exc:
        raise fail(f"invalid YAML: {exc}") from None
    except OSError as exc:
        raise fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": ")) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def discovery_cache() -> Path:
    """Where what servers' discovery said is kept a while: ``herder/discovery`` under the user's cache
    home (``$XDG_CACHE_HOME``, or ``~/.cache``), as kubectl keeps it under ``~/.kube/cache``."""
    home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(home) / "herder" / "discovery"


def connect_rest(kubeconfig: Path | None, *, timeout: float = 30.0) -> Rest:
    """A connection to the server of the kubeconfig found by the usual precedence; ``timeout``: how long
    an answer may take."""
    return Rest(load(kubeconfig_path(kubeconfig)), timeout=timeout, discovery_cache=discovery_cache())
