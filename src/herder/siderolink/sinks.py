"""What joined machines send herder through the tunnel: their events (``talos.events.sink=[SERVER]:8090``,
``events.EventSinkService/Publish``) and their kernel log (``talos.logging.kernel=tcp://[SERVER]:8092``, one
JSON object a line), both on herder's tunnel address only, so that only joined machines reach them.

A sender is known by its tunnel address (the tunnel checks it: WireGuard takes from each peer only its own
address). Events are counted and the last one kept for the machine's SideroLink status; kernel log lines are
kept in the data directory, one file per machine (``siderolink/kmsg/<uuid>.log``, the previous megabyte in
``.log.1``). Anything from an address no machine holds is dropped.
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
from pathlib import Path
from urllib.parse import unquote

import grpc

from herder.talos.api.siderolink import events_pb2 as pb
from herder.talos.api.siderolink import events_pb2_grpc as pb_grpc
from herder.talos.machine.client import EVENT_TYPE_PREFIX

log = logging.getLogger("herder.siderolink")

EVENTS_PORT = 8090
KERNEL_LOG_PORT = 8092
KEEP_BYTES = 1 << 20
"""A machine's kernel log file is rotated past this size (one previous file kept)."""
MAX_LINE = 64 << 10


@dataclass
class Received:
    """What one machine sent since its link's status was last written."""

    events: int = 0
    last_event: str = ""
    last_event_at: float = 0.0
    kernel_lines: int = 0


def kmsg_path(data_dir: Path, uuid: str) -> Path:
    return data_dir / "siderolink" / "kmsg" / f"{uuid}.log"


def _peer_address(peer: str) -> str:
    """The address of a gRPC peer string (``ipv6:[fd00::2]:41234``, ``ipv4:10.0.0.2:5``)."""
    text = unquote(peer).partition(":")[2]
    host = text.rpartition(":")[0].strip("[]")
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(host))
    return ""


class Sinks:
    """The two listeners; ``machine_at(address)`` names the machine (UUID) that holds a tunnel address."""

    def __init__(self, data_dir: Path, machine_at: Callable[[str], str | None]) -> None:
        self._data_dir = data_dir
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
            path = kmsg_path(self._data_dir, uuid)
            await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
            while line := await reader.readline():
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                text = message.get("msg") if isinstance(message, dict) else None
                if not isinstance(text, str):
                    continue
                stamp = str(message.get("talos-time") or "")
                await asyncio.to_thread(_append, path, f"{stamp} {message.get('facility', '')}: {text}\n")
                seen = self._of(uuid)
                seen.kernel_lines += 1
        except (OSError, asyncio.LimitOverrunError, ValueError) as exc:
            log.info("kernel log of %s ended: %s", uuid, exc)
        finally:
            self._senders.discard(writer)
            writer.close()


def _append(path: Path, line: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        if path.stat().st_size > KEEP_BYTES:
            path.replace(path.with_suffix(".log.1"))
    with path.open("a", encoding="utf-8") as out:
        out.write(line)


class _EventSink(pb_grpc.EventSinkServiceServicer):
    def __init__(self, sinks: Sinks) -> None:
        self._sinks = sinks

    async def Publish(
        self, request: pb.EventRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.EventResponse:
        if not self._sinks.event(context.peer(), request):
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "no joined machine has this address")
        return pb.EventResponse()
