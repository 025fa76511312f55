"""A TCP load balancer in front of one cluster's Kubernetes API servers, as Omni runs one per cluster.

It listens on one address, checks each backend (a control plane's ``IP:6443``) with a TCP connect every
few seconds (less often while every backend answers, as before), and forwards every connection it accepts to a healthy backend, round robin, as plain bytes:
TLS stays end to end between the client and the API server. With no healthy backend a connection is
closed at once, so clients fail fast and retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Sequence

from herder.workqueue import retry_delay

log = logging.getLogger(__name__)

CHECK_EVERY = 2.0
QUIET_EVERY = 30.0
"""The longest wait between checks while every backend answers: each round that finds them all healthy,
as the round before did, doubles the wait from ``check_every`` up to this. New backends, a failed check or
a connection that could not reach a backend make the checks frequent again at once."""
CHECK_TIMEOUT = 1.0
_CHUNK = 1 << 16


class EndpointBalancer:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        check_every: float = CHECK_EVERY,
        quiet_every: float = QUIET_EVERY,
        check_timeout: float = CHECK_TIMEOUT,
    ) -> None:
        self.host = host
        self.port = port
        self._check_every = check_every
        self._quiet_every = max(quiet_every, check_every)
        self._check_timeout = check_timeout
        self._backends: tuple[str, ...] = ()
        self._healthy: tuple[str, ...] = ()
        self._turn = itertools.count()
        self._server: asyncio.Server | None = None
        self._checker: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._pipes: set[asyncio.Task[None]] = set()

    @property
    def healthy(self) -> tuple[str, ...]:
        return self._healthy

    @property
    def backends(self) -> tuple[str, ...]:
        return self._backends

    def set_backends(self, backends: Sequence[str]) -> None:
        wanted = tuple(sorted(set(backends)))
        if wanted != self._backends:
            self._backends = wanted
            self._healthy = tuple(b for b in self._healthy if b in wanted)
            self._wake.set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.host, self.port, reuse_address=True)
        self._checker = asyncio.create_task(self._check_loop(), name=f"lb-check-{self.host}:{self.port}")

    async def stop(self) -> None:
        if self._checker is not None:
            self._checker.cancel()
        if self._server is not None:
            self._server.close()
        for pipe in list(self._pipes):
            pipe.cancel()
        await asyncio.gather(
            *(t for t in (self._checker, *self._pipes) if t is not None), return_exceptions=True
        )
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _check_loop(self) -> None:
        quiet_rounds = 0
        while True:
            self._wake.clear()
            checked = self._backends
            results = await asyncio.gather(*(self._check(b) for b in checked))
            # Backends may have changed while they were checked: keep only verdicts about current ones.
            healthy = tuple(b for b, ok in zip(checked, results, strict=True) if ok and b in self._backends)
            quiet_rounds = quiet_rounds + 1 if healthy == checked == self._healthy else 0
            self._healthy = healthy
            every = retry_delay(quiet_rounds + 1, self._check_every, self._quiet_every)
            # asyncio.timeout, not wait_for: Python 3.11's wait_for loses a cancellation that arrives as
            # the wake-up does, and ``stop`` then waited for this loop for ever (the cluster's deletion,
            # and every other cluster's endpoint behind it, hung).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(every):
                    await self._wake.wait()

    async def _check(self, backend: str) -> bool:
        host, _, port = backend.rpartition(":")
        try:
            async with asyncio.timeout(self._check_timeout):
                _, writer = await asyncio.open_connection(host.strip("[]"), int(port))
        except (OSError, TimeoutError):
            return False
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
        return True

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._pipes.add(task)
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            # ``stop`` ends the connections it cancels. The task must then end as finished, not as
            # cancelled: asyncio's server (Python 3.11) asks a cancelled handler for its exception,
            # which raises, and logs a CancelledError traceback for every open connection.
            writer.close()
        finally:
            self._pipes.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        candidates = self._healthy
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        for _ in range(len(candidates)):
            backend = candidates[next(self._turn) % len(candidates)]
            host, _, port = backend.rpartition(":")
            try:
                async with asyncio.timeout(self._check_timeout):
                    upstream = await asyncio.open_connection(host.strip("[]"), int(port))
                break
            except (OSError, TimeoutError):
                # The checks may be waiting long (all was well): the next round tells whether it is down.
                self._wake.set()
                continue
        if upstream is None:
            writer.close()
            return
        up_reader, up_writer = upstream
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                w.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()
