"""What joined machines send herder through the tunnel: their events (``talos.events.sink=[SERVER]:8090``,
``events.EventSinkService/Publish``) and their kernel log (``talos.logging.kernel=tcp://[SERVER]:8092``, one
JSON object a line), both on herder's tunnel address only, so that only joined machines reach them.

A sender is known by its tunnel address (the tunnel checks it: WireGuard takes from each peer only its own
address). Events are counted and the last one kept for the machine's SideroLink status; kernel log lines go
to the machine's logs (``herder.siderolink.kernel_logs``), written as machined's Dmesg writes them
(``facility: priority: [time]: message``), so ``herder machine dmesg`` reads the same either way. Anything
from an address no machine holds is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import grpc

from herder.siderolink.kernel_logs import KernelLogs
from herder.talos.api.siderolink import events_pb2 as pb
from herder.talos.api.siderolink import events_pb2_grpc as pb_grpc
from herder.talos.machine.client import EVENT_TYPE_PREFIX

log = logging.getLogger("herder.siderolink")

EVENTS_PORT = 8090
KERNEL_LOG_PORT = 8092
MAX_LINE = 64 << 10


@dataclass
class Received:
    """What one machine sent since its link's status was last written."""

    events: int = 0
    last_event: str = ""
    last_event_at: float = 0.0
    kernel_lines: int = 0


def _peer_address(peer: str) -> str:
    """The address of a gRPC peer string (``ipv6:[fd00::2]:41234``, ``ipv4:10.0.0.2:5``)."""
    text = unquote(peer).partition(":")[2]
    host = text.rpartition(":")[0].strip("[]")
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(host))
    return ""


class Sinks:
    """The two listeners; ``machine_at(address)`` names the machine (UUID) that holds a tunnel address."""

    def __init__(self, kernel_logs: KernelLogs, machine_at: Callable[[str], str | None]) -> None:
        self._kernel_logs = kernel_logs
        self._machine_at = machine_at
        self.received: dict[str, Received] = {}
        self._events = grpc.aio.server()
        pb_grpc.add_EventSinkServiceServicer_to_server(_EventSink(self), self._events)  # type: ignore[no-untyped-call]
        self._kmsg: asyncio.Server | None = None
        self._senders: set[asyncio.StreamWriter] = set()

    async def start(self, address: str) -> None:
        host = f"[{address}]" if ":" in address else address
        self._events.add_insecure_port(f"{host}:{EVENTS_PORT}")
        await self._events.start()
        self._kmsg = await asyncio.start_server(self._kernel_log, address, KERNEL_LOG_PORT, limit=MAX_LINE)

    async def stop(self) -> None:
        await self._events.stop(0.5)
        for writer in list(self._senders):
            writer.close()  # its reader sees the end, and its handler returns
        if self._kmsg is not None:
            self._kmsg.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._kmsg.wait_closed(), 1)
        await self._kernel_logs.close()

    def _of(self, uuid: str) -> Received:
        return self.received.setdefault(uuid, Received())

    def event(self, peer: str, request: pb.EventRequest) -> bool:
        uuid = self._machine_at(_peer_address(peer))
        if uuid is None:
            return False
        seen = self._of(uuid)
        seen.events += 1
        seen.last_event = request.data.type_url.removeprefix(EVENT_TYPE_PREFIX)
        seen.last_event_at = time.time()
        return True

    async def _kernel_log(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("",)
        uuid = self._machine_at(str(peer[0]))
        self._senders.add(writer)
        try:
            if uuid is None:
                return
            while line := await reader.readline():
                text = _dmesg_line(line)
                if text is not None:
                    await self._kernel_logs.keep(uuid, [text])
                    self._of(uuid).kernel_lines += 1
        except (OSError, asyncio.LimitOverrunError, ValueError) as exc:
            log.info("kernel log of %s ended: %s", uuid, exc)
        finally:
            self._senders.discard(writer)
            writer.close()
            if uuid is not None:
                self._kernel_logs.forget(uuid)


def _dmesg_line(line: bytes) -> str | None:
    """A kernel message of Talos's JSON (one a line) as machined's Dmesg writes it; None if it is none."""
    try:
        message: Any = json.loads(line)
    except ValueError:
        return None
    text = message.get("msg") if isinstance(message, dict) else None
    if not isinstance(text, str):
        return None
    facility, priority = message.get("facility") or "kern", message.get("priority") or "info"
    return f"{facility}: {priority}: [{message.get('talos-time') or ''}]: {text}"


class _EventSink(pb_grpc.EventSinkServiceServicer):
    def __init__(self, sinks: Sinks) -> None:
        self._sinks = sinks

    async def Publish(
        self, request: pb.EventRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.EventResponse:
        if not self._sinks.event(context.peer(), request):
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "no joined machine has this address")
        return pb.EventResponse()
