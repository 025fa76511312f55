"""Where a joined machine's kernel log goes: herder's machine logs (``herder.state.machine_logs``), as the
``kernel`` source of the machine, so that ``herder machine dmesg`` and the web UI show it as they show a
followed machine's — from the moment the machine joined, maintenance mode included (a machine that never
gets configured is one whose kernel log matters most).

Lines are written in the machine's scope as the store has it (read again at most every ``SCOPE_TTL``
seconds: a machine allocated to a cluster moves its new lines into that cluster's scope), and redacted of
whatever looks like a secret (a kernel command line carries the join token). A cluster's own secrets are
not known here; the kernel does not print them.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field

from herder.resources.machines import MACHINE
from herder.state.errors import NotFound
from herder.state.machine_logs import KERNEL, LogScope, MachineLogs, scope_of
from herder.state.store import Store
from herder.talos.redaction import LineRedactor, Redactor

SCOPE_TTL = 10.0
PENDING_MAX = 5_000
"""Lines held for a machine whose Machine is not made yet (a joined machine sends its boot's kernel log at
once; its Machine follows a moment later): past this, the oldest go."""
PENDING_FOR = 120.0
"""Seconds lines are held for a Machine that does not come; then they are dropped."""
RETRY = 0.5


@dataclass
class _Machine:
    scope: LogScope | None
    read_at: float
    redact: LineRedactor
    pending: deque[str] = field(default_factory=lambda: deque(maxlen=PENDING_MAX))
    waiting: asyncio.Task[None] | None = None


class KernelLogs:
    """Keeps the kernel log lines joined machines send, each in its machine's logs."""

    def __init__(self, store: Store, logs: MachineLogs, namespace: str) -> None:
        self._store = store
        self._logs = logs
        self._namespace = namespace
        self._machines: dict[str, _Machine] = {}

    async def keep(self, uuid: str, lines: list[str]) -> None:
        """Lines the machine ``uuid`` sent: kept now, or once its Machine is made."""
        known = self._machines.get(uuid)
        now = time.monotonic()
        if known is None:
            known = self._machines[uuid] = _Machine(await self._scope(uuid), now, LineRedactor(Redactor()))
        elif now - known.read_at > SCOPE_TTL and known.scope is not None:
            known.scope, known.read_at = await self._scope(uuid), now
        redacted = [known.redact(line) for line in lines]
        if known.scope is None:
            known.pending.extend(redacted)
            if known.waiting is None or known.waiting.done():
                known.waiting = asyncio.create_task(self._wait_for_machine(uuid, known))
            return
        self._logs.append(uuid, known.scope, KERNEL, redacted)

    async def _wait_for_machine(self, uuid: str, known: _Machine) -> None:
        deadline = time.monotonic() + PENDING_FOR
        while known.scope is None:
            if time.monotonic() > deadline:
                known.pending.clear()
                return
            await asyncio.sleep(RETRY)
            known.scope, known.read_at = await self._scope(uuid), time.monotonic()
        held, known.pending = list(known.pending), deque(maxlen=PENDING_MAX)
        self._logs.append(uuid, known.scope, KERNEL, held)

    async def _scope(self, uuid: str) -> LogScope | None:
        try:
            machine = await self._store.get(MACHINE.kind, uuid, self._namespace)
        except NotFound:
            return None
        return scope_of(machine)

    def forget(self, uuid: str) -> None:
        """The machine's connection ended: its scope is read afresh when it sends again (what is held for
        a Machine yet to come stays held)."""
        known = self._machines.get(uuid)
        if known is not None and (known.waiting is None or known.waiting.done()):
            del self._machines[uuid]

    async def close(self) -> None:
        waiting = [m.waiting for m in self._machines.values() if m.waiting is not None]
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
