"""Loopback ports (and networks) free now, for the servers that tests, benchmarks and throwaway etcd
members start.

A port the system picks (binding port 0) is one of its ephemeral ports, which any process's outgoing
connection may take at any moment: often before the server it was picked for listened on it. These
ports come from a range below the ephemeral ones (Linux: 32768 up), and each is claimed for two minutes
with a file of its number in a directory every picker shares, so that two processes starting servers at
once (pytest's workers) never pick the same one; ``claim`` does the same for anything else picked at
random (an emulator's network).
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import tempfile
import time
from pathlib import Path

# Not herder serve's default cluster endpoints (10000-10999), nor the ranges tests give their servers'
# cluster endpoints (20000-29999), nor the default ephemeral ports.
FIRST, LAST = 11000, 19999
# Long enough for the slowest server to start and listen on what it was given.
CLAIM_SECONDS = 120


def free_port(first: int = FIRST, last: int = LAST) -> int:
    """A port of ``first``-``last`` free on 127.0.0.1 now and claimed by no other picker."""
    for _ in range(1000):
        port = random.randint(first, last)
        if not claim(str(port)):
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port between {first} and {last} on 127.0.0.1")


def claim(name: str) -> bool:
    """Claim ``name`` for ``CLAIM_SECONDS``; False if another picker holds it."""
    claims = Path(tempfile.gettempdir()) / "herder-port-claims"
    claims.mkdir(exist_ok=True)
    return _claim(claims / name)


def _claim(path: Path) -> bool:
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        return True
    except FileExistsError:
        pass
    with contextlib.suppress(FileNotFoundError):
        if time.time() - path.stat().st_mtime < CLAIM_SECONDS:
            return False
        # A stale claim: taken again by whoever renames it away first.
        stale = path.with_name(f"{path.name}.{os.getpid()}.stale")
        path.rename(stale)
        stale.unlink()
        return _claim(path)
    return False
