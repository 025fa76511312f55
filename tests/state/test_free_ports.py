"""Ports for the servers tests and benchmarks start: below the ephemeral ones, free, and never the same
one to two pickers within a claim's time."""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path

import pytest

from herder.state.free_ports import FIRST, LAST, free_port


def test_a_claimed_port_is_not_handed_out_again_and_a_taken_one_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # claims of this test's own
    ports = range(31990, 32000)
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", 31995))
        taken.listen()
        picked = {free_port(ports[0], ports[-1]) for _ in range(9)}
        assert picked == set(ports) - {31995}
        # Every port of the range is claimed or taken now.
        with pytest.raises(RuntimeError, match="no free port between 31990 and 31999"):
            free_port(ports[0], ports[-1])
    port = free_port()
    assert FIRST <= port <= LAST
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))  # free for the server it was picked for
