"""Machine API clients kept open and shared: one per endpoint and client certificate.

A new client costs a TLS handshake on both sides, a local tunnel and a gRPC channel; a caller that asks
the same machines again and again (health probes every few seconds, the Talos API gateway) takes them
from here instead. A client whose machine stopped answering (unavailable, timed out) is dropped, so the
next call dials afresh rather than waiting out gRPC's reconnect backoff; the least recently used idle
clients are closed when more than ``keep`` are open.

Every client is opened by the pool's ``MachineDialer``: ``dial`` (a real ``MachineClient``) unless one is
injected — tests give controllers a dialer of fake machines.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from herder.talos.machine.client import Credentials, MachineClient
from herder.talos.machine.errors import DeadlineExceeded, Unavailable


class MachineDialer(Protocol):
    """Opens a client of one machine's Talos API (``options`` as ``MachineClient`` takes them)."""

    def __call__(
        self, endpoint: str, *, credentials: Credentials | None, **options: Any
    ) -> MachineClient: ...


def dial(endpoint: str, *, credentials: Credentials | None, **options: Any) -> MachineClient:
    """The real dialer: a ``MachineClient`` (it connects on its first call)."""
    return MachineClient(endpoint, credentials=credentials, **options)


@dataclass
class _Entry:
    client: MachineClient
    users: int = 0
    dropped: bool = False


class ClientPool:
    """Shared ``MachineClient``s; ``options`` are every client's (``timeout``, ``retries``…)."""

    def __init__(self, *, dialer: MachineDialer = dial, keep: int = 64, **options: Any) -> None:
        self._dialer = dialer
        self._keep = keep
        self._options = options
        self._entries: OrderedDict[tuple[str, bytes], _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @asynccontextmanager
    async def client(self, endpoint: str, credentials: Credentials | None) -> AsyncIterator[MachineClient]:
        """A client of ``endpoint`` with ``credentials`` (None: insecure), held for the caller's calls."""
        key = (endpoint, credentials.crt if credentials is not None else b"")
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(
                self._dialer(endpoint, credentials=credentials, **self._options)
            )
        self._entries.move_to_end(key)
        entry.users += 1
        try:
            yield entry.client
        except (Unavailable, DeadlineExceeded):
            if self._entries.get(key) is entry:
                del self._entries[key]
            entry.dropped = True
            raise
        finally:
            entry.users -= 1
            if entry.dropped and entry.users == 0:
                await entry.client.close()
            await self._trim()

    def dial(self, endpoint: str, credentials: Credentials | None, **options: Any) -> MachineClient:
        """A client of its own (for a stream the caller keeps open, and closes), with the pool's options
        and ``options`` over them."""
        return self._dialer(endpoint, credentials=credentials, **{**self._options, **options})

    async def _trim(self) -> None:
        if len(self._entries) <= self._keep:
            return  # the common case, on every release: no walk over every entry
        idle = [key for key, entry in self._entries.items() if entry.users == 0]
        for key in idle[: max(0, len(self._entries) - self._keep)]:
            await self._entries.pop(key).client.close()

    async def close(self) -> None:
        entries, self._entries = list(self._entries.values()), OrderedDict()
        for entry in entries:
            await entry.client.close()
