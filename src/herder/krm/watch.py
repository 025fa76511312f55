"""The WATCH response: newline-delimited JSON events streamed until a timeout or the client leaves."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


def event_line(kind: str, payload: bytes) -> bytes:
    """One watch event, ``{"type": kind, "object": payload}``, as a line of the stream."""
    return b'{"type":"' + kind.encode() + b'","object":' + payload + b"}\n"


class WatchStream(StreamingResponse):
    """Streams ``lines`` for at most ``timeout`` seconds, then ends the response cleanly.

    The stream also ends when the client disconnects, even while no event is due; either way the
    event source is cancelled, so the store's subscription is released at once.
    """

    def __init__(self, lines: AsyncIterator[bytes], timeout: float) -> None:
        super().__init__(lines, media_type="application/json")
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})

        async def pump() -> None:
            async for chunk in self.body_iterator:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})

        async def disconnected() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        streaming = asyncio.create_task(pump())
        leaving = asyncio.create_task(disconnected())
        try:
            done, _ = await asyncio.wait(
                {streaming, leaving}, timeout=self.timeout, return_when="FIRST_COMPLETED"
            )
        finally:
            for task in (streaming, leaving):
                task.cancel()
            await asyncio.gather(streaming, leaving, return_exceptions=True)
        if leaving not in done:
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
