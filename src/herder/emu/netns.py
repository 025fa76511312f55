"""Network namespaces for emulated machines that join over SideroLink: each such machine lives in a
namespace of its own, as a machine on a network of its own does, and whatever it listens on or dials from
(apid, kube-apiserver, its Provision call) is a socket made inside that namespace.

A socket belongs to the namespace it was made in, whichever thread uses it later: a short-lived thread
enters the namespace (``setns``), makes the socket and ends, so the emulator's own threads never move.
Which addresses live in which namespace is kept here (``bind``), so a listener for an address made
anywhere in the emulator lands in the right namespace.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

NETNS_DIR = Path("/var/run/netns")
CLONE_NEWNET = 0x40000000

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_homes: dict[str, str] = {}
"""Address → the namespace it lives in."""

T = TypeVar("T")


def home(address: str, netns: str | None) -> None:
    """Say that ``address`` lives in ``netns`` (None: the emulator's own namespace)."""
    if netns is None:
        _homes.pop(address, None)
    else:
        _homes[address] = netns


def namespace_of(address: str) -> str | None:
    return _homes.get(address.strip("[]"))


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def _inside(netns: str, make: Callable[[], T]) -> T:
    """``make()`` run in a thread inside ``netns``."""
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            with open(NETNS_DIR / netns) as target:
                _setns(target.fileno())
            result.append(make())
        except BaseException as exc:
            error.append(exc)
        # The thread ends here, in the namespace it entered: nothing else ever runs in it.

    thread = threading.Thread(target=run, name=f"netns-{netns}", daemon=True)
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


async def inside(netns: str, make: Callable[[], T]) -> T:
    return await asyncio.to_thread(_inside, netns, make)


async def listener(address: str, port: int) -> socket.socket | None:
    """A listening socket on ``address:port`` in the namespace ``address`` lives in; None when it lives in
    the emulator's own (the caller binds as usual)."""
    netns = namespace_of(address)
    if netns is None:
        return None

    def make() -> socket.socket:
        # Of protocol TCP, so that asyncio turns Nagle's algorithm off on its connections (as on one it
        # made itself): a reply written in parts would wait for the peer's delayed acknowledgement.
        sock = socket.socket(
            socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP
        )
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address, port))
            sock.listen(256)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        return sock

    return await inside(netns, make)


async def connect(netns: str, host: str, port: int, timeout: float = 10) -> socket.socket:
    """A TCP connection to ``host:port`` from inside ``netns``."""

    def make() -> socket.socket:
        sock = socket.socket(
            socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP
        )
        sock.setblocking(False)
        return sock

    sock = await inside(netns, make)
    try:
        await asyncio.wait_for(asyncio.get_running_loop().sock_connect(sock, (host, port)), timeout)
    except BaseException:
        sock.close()
        raise
    return sock


class Dialer:
    """A local door into a namespace: every connection to ``127.0.0.1:port`` is relayed to ``host:port`` dialled
    from inside ``netns`` (gRPC's client cannot be handed a socket, but it can dial this)."""

    def __init__(self, netns: str, host: str, port: int) -> None:
        self._target = (netns, host, port)
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            sock = await connect(*self._target)
        except OSError:
            writer.close()
            return
        far_reader, far_writer = await asyncio.open_connection(sock=sock)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, far_writer), pipe(far_reader, writer))

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
