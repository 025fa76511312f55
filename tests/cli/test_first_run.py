"""A first run as a new user makes it: ``herder demo`` (what ``make run`` runs) while something else holds
one of the addresses it needs ends at once, with one line naming the address, what it is for and the
flag that moves it, instead of running half of itself. The held addresses are free ones the test takes,
never the defaults, which a user's demo may hold."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.server import HERDER, free_port, random_cidr, stop
from tests.cli.test_cli import demo_addresses


@contextlib.contextmanager
def held(host: str, port: int) -> Iterator[None]:
    """``host:port`` listened on by someone else (this test) while the block runs."""
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind((host, port))
        other.listen()
        yield


def _machines() -> list[str]:
    return ["--machine-cidr", random_cidr()]


def _with(args: list[str], flag: str, value: str) -> list[str]:
    out = list(args)
    out[out.index(flag) + 1] = value
    return out


@pytest.mark.parametrize(
    ("flag", "what"),
    [
        ("--listen", "herder's API"),
        ("--talos-listen", "the Talos API gateway"),
        ("--emulator-listen", "the emulator's control API"),
        ("--machine-cidr", "emulated machine"),
    ],
)
def test_a_taken_address_ends_the_demo_at_once(tmp_path: Path, flag: str, what: str) -> None:
    args = demo_addresses()
    if flag == "--machine-cidr":
        cidr = random_cidr()
        host, port = cidr.replace(".0/24", ".1"), 50000  # the first machine's address, on its own IP
        args = _with(args, flag, cidr)
    else:
        host, port = "127.0.0.1", free_port()
        args = _with(args, flag, f"{host}:{port}")
    with held(host, port):
        started = time.monotonic()
        result = subprocess.run(
            [HERDER, "demo", "--data-dir", str(tmp_path / "demo"), *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        took = time.monotonic() - started
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert f"{host}:{port}" in errors[0] and what in errors[0] and flag in errors[0], errors[0]
    assert took < 10, f"{took:.1f} s"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_emulator_stops_at_once_on_a_signal(tmp_path: Path, sig: signal.Signals) -> None:
    process = subprocess.Popen(
        [
            HERDER,
            "emu",
            "run",
            "--data-dir",
            str(tmp_path),
            "--machines",
            "3",
            "--listen",
            "127.0.0.1:0",
            *_machines(),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        assert "control API" in process.stderr.readline()  # it listens
        process.send_signal(sig)
        stopping = time.monotonic()
        assert process.wait(15) == 0
        took = time.monotonic() - stopping
    finally:
        stop(process)
    assert "Traceback" not in process.stderr.read()
    assert took < 3, f"{took:.1f} s"
