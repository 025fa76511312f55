"""The addresses a serving command listens on, checked before it loads the server: one that is taken ends
the command at once with one line naming it, what it is for and the flag that moves it. (The servers
check again when they bind, with the same words, for an address taken in between.)"""

from __future__ import annotations

import contextlib
import errno
import socket

from herder.cli.errors import fail


def check_free(listen: str, what: str, flag: str) -> None:
    """Fail unless ``listen`` (``HOST:PORT``; port 0 is any) can be listened on; ``what`` listens there."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    if not port.isdigit() or int(port) == 0:
        return
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except OSError:
        return  # a name that does not resolve is the server's to report
    with contextlib.closing(socket.socket(family, kind, proto)) as probe:
        # As the servers bind: an address left in TIME_WAIT by a previous run is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise fail(
                    f"{listen}, where {what} listens, is in use: free it or move it with {flag}"
                ) from None
            raise fail(f"{flag} {listen}: cannot listen there: {exc.strerror or exc}") from None
