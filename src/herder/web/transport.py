"""An httpx transport that calls an ASGI app in-process and streams its answer.

The web UI reaches objects through the API app it is served beside, as the browser's user, so that
every read and write goes through exactly the API's authentication, authorization, admission and audit.
httpx's own ASGI transport waits for the whole body, which a watch never finishes: this one hands the
body over as the app sends it, and tells the app the client left when the response is closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
from starlette.types import ASGIApp, Message

_END = object()


class _Body(httpx.AsyncByteStream):
    def __init__(self, chunks: asyncio.Queue[object], done: asyncio.Event, task: asyncio.Task[None]) -> None:
        self._chunks, self._done, self._task = chunks, done, task

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            chunk = await self._chunks.get()
            if chunk is _END:
                return
            assert isinstance(chunk, bytes)
            yield chunk

    async def aclose(self) -> None:
        self._done.set()
        if not self._task.done():
            # An app blocked on something other than receive() (a watch waiting for its next event)
            # would not notice the disconnect soon: it is stopped outright.
            await asyncio.sleep(0)
            self._task.cancel()
        # The app's own end (cancelled, or failed after answering) is no error of the reader's; a
        # cancellation of the reader still propagates.
        await asyncio.gather(self._task, return_exceptions=True)


class StreamingASGITransport(httpx.AsyncBaseTransport):
    """Requests to ``app`` as if from ``client`` (host, port) with ``user_agent``: the audit trail and
    the limit of failed authentications see the browser, not loopback."""

    def __init__(
        self, app: ASGIApp, client: tuple[str, int] = ("127.0.0.1", 0), user_agent: str = ""
    ) -> None:
        self._app = app
        self._client = client
        self._user_agent = user_agent.encode("latin-1", "replace")

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        url = request.url
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": request.method,
            "scheme": url.scheme,
            "path": url.path,
            "raw_path": url.raw_path.split(b"?")[0],
            "query_string": url.query,
            "root_path": "",
            "headers": [
                (k.lower(), self._user_agent if k.lower() == b"user-agent" and self._user_agent else v)
                for k, v in request.headers.raw
            ],
            "client": self._client,
            "server": (url.host, url.port or 443),
        }
        sent_request = False
        done = asyncio.Event()
        started: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        chunks: asyncio.Queue[object] = asyncio.Queue()

        async def receive() -> Message:
            nonlocal sent_request
            if not sent_request:
                sent_request = True
                return {"type": "http.request", "body": body, "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                started.set_result(message)
            elif message["type"] == "http.response.body":
                if message.get("body"):
                    chunks.put_nowait(bytes(message["body"]))
                if not message.get("more_body", False):
                    chunks.put_nowait(_END)

        async def run() -> None:
            try:
                await self._app(scope, receive, send)
            except Exception as exc:
                if not started.done():
                    started.set_exception(exc)
            finally:
                if not started.done():
                    started.set_exception(
                        RuntimeError(f"{request.method} {url.path}: the API sent no answer")
                    )
                chunks.put_nowait(_END)

        task = asyncio.create_task(run())
        try:
            start = await started
        except BaseException:
            task.cancel()
            raise
        headers = [(bytes(k), bytes(v)) for k, v in start.get("headers", [])]
        return httpx.Response(start["status"], headers=headers, stream=_Body(chunks, done, task))
