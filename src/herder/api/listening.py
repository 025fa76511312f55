"""TCP listeners made before their servers: the API's and the Talos gateway's, bound at start so that a
port in use ends the start at once.

``socket.create_server`` makes a socket of protocol 0, and asyncio turns Nagle's algorithm off
(``TCP_NODELAY``) only on connections of a socket that says it is TCP: on those of ``create_server``, a
response written in two parts (headers, then the body) waited for the client's delayed
acknowledgement, 40 ms on Linux, on every request. A listener made here says it is TCP.
"""

from __future__ import annotations

import socket


def tcp_listener(host: str, port: int, *, backlog: int) -> socket.socket:
    """A socket listening on ``host:port``, whose connections asyncio sends on at once."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    made = socket.create_server((host, port), family=family, backlog=backlog)
    # Of the same descriptor, a socket whose protocol is asked of the kernel (IPPROTO_TCP), as accepted
    # connections then are too.
    return socket.socket(fileno=made.detach())
