"""One-line failures for every command: ``error: …`` on stderr and exit code 1, never a traceback."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer


class UsageFailure(Exception):
    """A mistake of the user's that a command found itself (a bad flag value, a file in the way)."""


def fail(message: str) -> typer.Exit:
    """Print one error line on stderr; raise the returned exit to end the command."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


@contextmanager
def one_line_errors(*expected: type[Exception]) -> Iterator[None]:
    """Turn ``UsageFailure`` and the ``expected`` errors into one error line and exit code 1."""
    caught: tuple[type[Exception], ...] = (*expected, UsageFailure)
    try:
        yield
    except caught as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        raise fail("; ".join(lines) or type(e).__name__) from None
