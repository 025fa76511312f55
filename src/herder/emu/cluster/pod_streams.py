"""The pods' streaming subresources of the emulated kube-apiserver, answered as kube-apiserver and the kubelet
answer them (the emulated kubelet is in-process: ``containers`` says what the containers do):

- ``pods/log`` (GET): a container's log, with ``follow``, ``timestamps``, ``tailLines``, ``sinceSeconds``,
  ``sinceTime``, ``limitBytes``; a chunked ``text/plain`` answer that, followed, goes on until the pod goes.
- ``pods/exec`` and ``pods/attach``: over a WebSocket (subprotocols ``v5.channel.k8s.io``,
  ``v4.channel.k8s.io``: each message a channel byte — 0 stdin, 1 stdout, 2 stderr, 3 the status, 4 resize —
  and, in v5, 255 to close a channel) or over SPDY/3.1 (``v4.channel.k8s.io``: a stream per channel, told
  by its ``streamtype`` header). The command's end is a ``metav1.Status`` on the error channel
  (``NonZeroExitCode`` with the exit code). Attach follows the container's output from now on.
- ``pods/portforward``: SPDY/3.1 (``portforward.k8s.io``), directly or tunnelled through a WebSocket
  (subprotocol ``SPDY/3.1+portforward.k8s.io``, as kubectl 1.31+ tries first): each forwarded connection is a
  pair of streams (``streamtype`` error and data, same ``requestid`` and ``port``), its data going to the
  container serving that port, or an error ("connection refused") when none does.

Authorization is Kubernetes': ``get`` for a GET, ``create`` for a POST, and a WebSocket upgrade (a GET) of
exec, attach and port-forward needs ``create`` too, as kube-apiserver asks since 1.30.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from herder.emu.cluster import spdy
from herder.emu.cluster.access import RbacPolicy
from herder.emu.cluster.authorizer import Attributes
from herder.emu.cluster.containers import Container, Logs, PortServer, Process, run
from herder.emu.cluster.identity import KubeUser
from herder.emu.cluster.upgrades import SpdyConnection, WebSocket, request_head
from herder.krm.status import ApiError, api_error
from herder.krm.takeover import TAKEOVER, TakeOver
from herder.resources import Resource
from herder.resources.kubernetes import POD
from herder.state.errors import NotFound
from herder.state.store import Store

log = logging.getLogger(__name__)

SUBRESOURCES = ("log", "exec", "attach", "portforward")
WEBSOCKET_CHANNELS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
SPDY_CHANNELS = ("v4.channel.k8s.io",)
"""Over SPDY only v4 (every kubectl since 1.5 offers it): its error stream carries a Status, older ones text."""
PORT_FORWARD = "portforward.k8s.io"
TUNNELLED_PORT_FORWARD = "SPDY/3.1+" + PORT_FORWARD
STREAM_CREATION_TIMEOUT = 30.0
"""Seconds a SPDY client has to open the streams of an exec (kubelet's streamCreationTimeout)."""
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255

NodeUp = Callable[[str], bool]


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "").lower() in ("1", "true")


def _integer(request: Request, name: str) -> int | None:
    value = request.query_params.get(name)
    if value in (None, ""):
        return None
    if not value.lstrip("-").isdigit():
        raise ApiError(400, f"{name} must be an integer, not {value!r}")
    return int(value)


def exit_status(code: int) -> dict[str, Any]:
    """The Status ending a command: Success, or NonZeroExitCode with the code."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: error executing command, exit code {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def _not_found_status(program: str) -> dict[str, Any]:
    """containerd's refusal of a program that is not there, as kubelet reports it."""
    cause = (
        "error executing command in container: failed to exec in container: OCI runtime exec failed: exec "
        f'failed: unable to start container process: exec: "{program}": executable file not found in $PATH: '
        "unknown"
    )
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"Internal error occurred: {cause}",
        "reason": "InternalError",
        "details": {"causes": [{"message": cause}]},
        "code": 500,
    }


class Channels(Protocol):
    """A command's standard streams, as one transport carries them."""

    async def stdin(self) -> bytes: ...

    def write(self, channel: int, data: bytes) -> None: ...

    def finish(self, status: dict[str, Any]) -> None: ...


class WebSocketChannels:
    """The channels of ``v4``/``v5.channel.k8s.io``: one WebSocket, a channel byte before each message."""

    def __init__(self, head: bytes, subprotocol: str, stdin: bool) -> None:
        self._wants_stdin = stdin
        self._input: asyncio.Queue[bytes] = asyncio.Queue()
        self._input_ended = False
        self.websocket = WebSocket(head, subprotocol, self._message, self._closed)

    def _message(self, data: bytes) -> None:
        if not data:
            return
        if data[0] == STDIN and len(data) > 1:
            self._input.put_nowait(data[1:])
        elif data[0] == CLOSE and data[1:2] == bytes([STDIN]):
            self._input.put_nowait(b"")

    def _closed(self) -> None:
        self._input.put_nowait(b"")

    async def stdin(self) -> bytes:
        if not self._wants_stdin or self._input_ended:
            return b""
        chunk = await self._input.get()
        self._input_ended = not chunk
        return chunk

    def write(self, channel: int, data: bytes) -> None:
        if data:
            self.websocket.send(bytes([channel]) + data)

    def finish(self, status: dict[str, Any]) -> None:
        self.websocket.send(bytes([ERROR]) + json.dumps(status).encode())
        self.websocket.close()


class SpdyChannels:
    """The channels of ``v4.channel.k8s.io`` over SPDY: a stream per channel, opened by the client."""

    _TYPES = {"stdin": STDIN, "stdout": STDOUT, "stderr": STDERR, "error": ERROR, "resize": RESIZE}

    def __init__(self, expected: set[int]) -> None:
        self._expected = expected
        self._streams: dict[int, spdy.Stream] = {}
        self.ready = asyncio.Event()
        self.connection: SpdyConnection | None = None

    def on_stream(self, stream: spdy.Stream) -> None:
        channel = self._TYPES.get(stream.header("streamtype"))
        if channel is None:
            stream.reset(spdy.RST_REFUSED_STREAM)
            return
        self._streams[channel] = stream
        if self._expected <= self._streams.keys():
            self.ready.set()

    async def stdin(self) -> bytes:
        stream = self._streams.get(STDIN)
        return await stream.read() if stream is not None else b""

    def write(self, channel: int, data: bytes) -> None:
        stream = self._streams.get(channel)
        if stream is not None:
            stream.write(data)

    def finish(self, status: dict[str, Any]) -> None:
        error = self._streams.get(ERROR)
        if error is not None:
            error.write(json.dumps(status).encode())
        for stream in self._streams.values():
            stream.close()
        if self.connection is not None:
            self.connection.close()


class PortForwarding:
    """The forwarded connections of one port-forward session, each to the container serving its port."""

    def __init__(
        self, pod: Resource, containers: list[Container], logs: Logs, tasks: set[asyncio.Task[None]]
    ) -> None:
        self.pod = pod
        self.by_port = {port: c for c in containers for port in sorted(c.ports, reverse=True)}
        self.logs = logs
        self._tasks = tasks
        self._pairs: dict[str, dict[str, spdy.Stream]] = {}

    def on_stream(self, stream: spdy.Stream) -> None:
        kind = stream.header("streamtype")
        if kind not in ("error", "data"):
            stream.reset(spdy.RST_REFUSED_STREAM)
            return
        request = stream.header("requestid") or stream.header("port")
        pair = self._pairs.setdefault(request, {})
        pair[kind] = stream
        if "error" in pair and "data" in pair:
            del self._pairs[request]
            task = asyncio.get_running_loop().create_task(self._forward(pair["error"], pair["data"]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _forward(self, error: spdy.Stream, data: spdy.Stream) -> None:
        raw = data.header("port")
        container = self.by_port.get(int(raw)) if raw.isdigit() else None
        if container is None:
            uid = self.pod.metadata.uid or ""
            reason = "connect: connection refused" if raw.isdigit() else f"invalid port {raw!r}"
            error.write(
                f"error forwarding port {raw} to pod {uid}, uid : failed to connect to localhost:{raw} inside "
                f"namespace of pod {self.pod.name}: {reason}".encode()
            )
            error.close()
            data.close()
            return
        server = PortServer(container, int(raw), self.logs)
        while True:
            chunk = await data.read()
            answer, close = server.receive(chunk)
            data.write(answer)
            if close or not chunk:
                break
        data.close()
        error.close()


class PodStreams:
    """``/api/v1/namespaces/NS/pods/NAME/{log,exec,attach,portforward}``, as an ASGI application."""

    def __init__(self, store: Store, policy: RbacPolicy, logs: Logs, node_up: NodeUp) -> None:
        self.store = store
        self.policy = policy
        self.logs = logs
        self.node_up = node_up
        self._tasks: set[asyncio.Task[None]] = set()

    async def __call__(
        self, scope: dict[str, Any], receive: Any, send: Any, namespace: str, name: str, what: str
    ) -> None:
        request = Request(scope, receive)
        try:
            response = await self._answer(request, namespace, name, what)
        except Exception as exc:
            response = api_error(exc, POD, name).response()
        if response is not None:
            await response(scope, receive, send)

    async def _answer(self, request: Request, namespace: str, name: str, what: str) -> Response | None:
        who = await self.policy.authenticate(request)
        upgrade = request.headers.get("upgrade", "").lower()
        verb = "get" if request.method == "GET" else "create" if request.method == "POST" else ""
        if not verb or (what == "log" and verb != "get"):
            raise ApiError(405, "the server does not allow this method on the requested resource")
        attributes = Attributes(verb, namespace=namespace, resource="pods", subresource=what, name=name)
        self.policy.check(who, attributes)
        if upgrade == "websocket" and what != "log":
            self.policy.check(who, Attributes("create", namespace, "", "pods", what, name))
        pod = await self.store.get(POD, name, namespace)
        node = (pod.spec or {}).get("nodeName")
        if not node:
            raise ApiError(400, f"pod {name} does not have a host assigned")
        if not self.node_up(node):
            raise ApiError(503, f"error dialing backend: the kubelet of node {node} does not answer")
        if what == "log":
            return self._log(request, pod)
        take_over = request.scope.get("extensions", {}).get(TAKEOVER)
        if take_over is None:
            raise ApiError(400, "streaming needs a connection of the API server's own")
        if what == "portforward":
            self._port_forward(request, upgrade, pod, take_over)
        else:
            self._exec(request, upgrade, pod, who, attach=what == "attach", take_over=take_over)
        return None

    # --- log ---

    def _container(self, request: Request, pod: Resource) -> Container:
        data = pod.to_dict()
        containers = (pod.spec or {}).get("containers") or []
        wanted = request.query_params.get("container")
        if not wanted:
            if len(containers) != 1:
                names = " ".join(c["name"] for c in containers)
                raise ApiError(
                    400, f"a container name must be specified for pod {pod.name}, choose one of: [{names}]"
                )
            wanted = containers[0]["name"]
        spec = next((c for c in containers if c["name"] == wanted), None)
        if spec is None:
            raise ApiError(400, f"container {wanted} is not valid for pod {pod.name}")
        return Container.of(data, spec, str((pod.spec or {}).get("nodeName")))

    def _log(self, request: Request, pod: Resource) -> Response:
        container = self._container(request, pod)
        if _flag(request, "previous"):
            raise ApiError(
                400, f'previous terminated container "{container.name}" in pod "{pod.name}" not found'
            )
        follow, timestamps = _flag(request, "follow"), _flag(request, "timestamps")
        tail, limit = _integer(request, "tailLines"), _integer(request, "limitBytes")
        since = self._since(request)

        async def alive() -> bool:
            try:
                now = await self.store.get(POD, pod.name, pod.namespace)
            except NotFound:
                return False
            return now.metadata.uid == pod.metadata.uid and self.node_up(
                str((now.spec or {}).get("nodeName"))
            )

        async def body() -> AsyncIterator[bytes]:
            lines, written = await self.logs.lines(container)
            lines = [(t, line) for t, line in lines if since is None or t >= since]
            if tail is not None:
                lines = lines[-tail:] if tail > 0 else []
            budget = limit
            stream = self.logs.follow(container, written, alive) if follow else None

            async def every() -> AsyncIterator[tuple[float, str]]:
                for item in lines:
                    yield item
                if stream is not None:
                    async for item in stream:
                        yield item

            async for stamp, line in every():
                text = (_rfc3339_nano(stamp) + " " if timestamps else "") + line + "\n"
                chunk = text.encode()
                if budget is not None:
                    chunk, budget = chunk[:budget], budget - len(chunk)
                yield chunk
                if budget is not None and budget <= 0:
                    return

        return StreamingResponse(body(), media_type="text/plain")

    @staticmethod
    def _since(request: Request) -> float | None:
        seconds = _integer(request, "sinceSeconds")
        if seconds is not None:
            return datetime.now(UTC).timestamp() - seconds
        stamp = request.query_params.get("sinceTime")
        if stamp:
            try:
                return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
            except ValueError:
                raise ApiError(400, f"sinceTime must be an RFC 3339 time, not {stamp!r}") from None
        return None

    # --- exec and attach ---

    def _exec(
        self,
        request: Request,
        upgrade: str,
        pod: Resource,
        who: KubeUser,
        *,
        attach: bool,
        take_over: TakeOver,
    ) -> None:
        container = self._container(request, pod)
        command = request.query_params.getlist("command")
        if not attach and not command:
            raise ApiError(400, "you must specify at least 1 command")
        stdin, stdout, stderr, tty = (_flag(request, n) for n in ("stdin", "stdout", "stderr", "tty"))
        if not (stdin or stdout or stderr):
            raise ApiError(400, "you must specify at least 1 of stdin, stdout, stderr")
        stderr = stderr and not tty
        channels: Channels
        if upgrade == "websocket":
            chosen = _negotiate(_offered_subprotocols(request), WEBSOCKET_CHANNELS)
            websocket = WebSocketChannels(request_head(request.scope), chosen, stdin)
            channels = websocket
            take_over(websocket.websocket)
            ready: asyncio.Event | None = None
        elif upgrade == "spdy/3.1":
            chosen = _negotiate(request.headers.getlist("x-stream-protocol-version"), SPDY_CHANNELS)
            expected = {ERROR} | {c for c, on in ((STDIN, stdin), (STDOUT, stdout), (STDERR, stderr)) if on}
            if tty:
                expected.add(RESIZE)
            spdy_channels = SpdyChannels(expected)
            spdy_channels.connection = SpdyConnection(chosen, spdy_channels.on_stream)
            channels, ready = spdy_channels, spdy_channels.ready
            take_over(spdy_channels.connection)
        else:
            raise ApiError(400, "Upgrade request required")
        work = self._attach(container, channels) if attach else self._run(container, command, channels, tty)
        task = asyncio.get_running_loop().create_task(self._when_ready(ready, channels, work))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _when_ready(
        ready: asyncio.Event | None, channels: Channels, work: Coroutine[Any, Any, None]
    ) -> None:
        try:
            if ready is not None:
                async with asyncio.timeout(STREAM_CREATION_TIMEOUT):
                    await ready.wait()
            await work
        except TimeoutError:
            work.close()
            channels.finish(
                {
                    "metadata": {},
                    "status": "Failure",
                    "message": "timed out waiting for client to create streams",
                    "code": 408,
                }
            )
        except Exception:
            log.exception("a stream of the emulated kube-apiserver failed")
            channels.finish({"metadata": {}, "status": "Failure", "message": "internal error", "code": 500})

    @staticmethod
    async def _run(container: Container, command: list[str], channels: Channels, tty: bool) -> None:
        def out(channel: int) -> Callable[[bytes], None]:
            if tty:  # a terminal: one stream, lines end in CR LF
                return lambda data: channels.write(STDOUT, data.replace(b"\n", b"\r\n"))
            return lambda data: channels.write(channel, data)

        process = Process(out(STDOUT), out(STDERR), channels.stdin, tty=tty)
        await run(container, command, process)
        if process.not_found:
            channels.finish(_not_found_status(process.not_found))
        else:
            channels.finish(exit_status(process.code))

    async def _attach(self, container: Container, channels: Channels) -> None:
        """The container's output from now on; what comes in on stdin goes nowhere."""
        _, written = await self.logs.lines(container)

        async def forever() -> bool:
            return True

        async def drain() -> None:
            while await channels.stdin():
                pass

        drained = asyncio.get_running_loop().create_task(drain())
        try:
            async for _, line in self.logs.follow(container, written, forever):
                channels.write(STDOUT, line.encode() + b"\n")
                if drained.done():
                    break
        finally:
            drained.cancel()
        channels.finish(exit_status(0))

    # --- port-forward ---

    def _port_forward(self, request: Request, upgrade: str, pod: Resource, take_over: TakeOver) -> None:
        data = pod.to_dict()
        node = str((pod.spec or {}).get("nodeName"))
        containers = [Container.of(data, c, node) for c in (pod.spec or {}).get("containers") or ()]
        forwarding = PortForwarding(pod, containers, self.logs, self._tasks)
        if upgrade == "websocket":
            _negotiate(_offered_subprotocols(request), (TUNNELLED_PORT_FORWARD,))
            session: spdy.Session | None = None

            def feed(message: bytes) -> None:
                assert session is not None
                try:
                    session.feed(message)
                except spdy.ProtocolError as e:
                    log.debug("SPDY protocol error in a tunnel: %s", e)
                    websocket.close(1002)

            def closed() -> None:
                if session is not None:
                    session.lost()

            websocket = WebSocket(request_head(request.scope), TUNNELLED_PORT_FORWARD, feed, closed)
            session = spdy.Session(websocket.send, forwarding.on_stream)
            take_over(websocket)
        elif upgrade == "spdy/3.1":
            _negotiate(request.headers.getlist("x-stream-protocol-version"), (PORT_FORWARD,))
            take_over(SpdyConnection(PORT_FORWARD, forwarding.on_stream))
        else:
            raise ApiError(400, "Upgrade request required")


def _offered_subprotocols(request: Request) -> list[str]:
    return [
        p.strip()
        for h in request.headers.getlist("sec-websocket-protocol")
        for p in h.split(",")
        if p.strip()
    ]


def _negotiate(offered: list[str], supported: tuple[str, ...]) -> str:
    """The first protocol of ours the client offers (kube-apiserver's preference, not the client's)."""
    for protocol in supported:
        if protocol in offered:
            return protocol
    raise ApiError(
        400,
        f"unable to upgrade: unable to negotiate protocol: client supports {offered}, server accepts {list(supported)}",
    )


def _rfc3339_nano(stamp: float) -> str:
    moment = datetime.fromtimestamp(stamp, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond:06d}000Z"
