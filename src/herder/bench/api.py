"""``python -m herder.bench api``: the API server's GET, LIST and WATCH figures at 50 concurrent clients.

The server is ``herder.krm``'s app on an SQLite store, run by uvicorn in its own process, as
``herder serve`` would run it. Beside it, in the same run and served the same way, a bare Starlette
app answers the same bytes from memory: the baseline. The clients speak HTTP/1.1 over keep-alive
connections with a minimal hand-written client, so that the figures are the server's, not an HTTP
library's. WATCH delivery is 50 watchers each receiving every one of a stream of updates; its latency
is from sending the write to each watcher reading the event.

``python -m herder.bench.api serve --state URL`` is the server process itself (also used by tests):
it prints ``listening on PORT`` once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import uvicorn
import uvloop
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from herder.bench.report import emit, percentile
from herder.krm.app import build_app
from herder.resources import Resource
from herder.resources.catalog import herder_registry
from herder.state.errors import AlreadyExists
from herder.state.url import open_store

CLIENTS = 50
GROUP_PATH = "/apis/herder.dev/v1alpha1/namespaces/default/configpatches"


# the server process


def _baseline_app(payloads: dict[str, bytes]) -> Starlette:
    async def answer(request: Request) -> Response:
        return Response(payloads[request.url.path], media_type="application/json")

    return Starlette(routes=[Route(path, answer) for path in payloads])


async def _krm_app(state: str, policy: str | None) -> Starlette:
    registry = herder_registry()
    store = await open_store(state, registry, key=os.urandom(32))
    default = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "default"},
        "status": {"phase": "Active"},
    }
    with contextlib.suppress(AlreadyExists):
        await store.create(Resource.model_validate(default))
    if policy is None:
        return build_app(registry, store)
    module, _, name = policy.partition(":")
    return build_app(registry, store, getattr(importlib.import_module(module), name)())


async def _serve(args: argparse.Namespace, baseline: dict[str, bytes] | None) -> None:
    app = _baseline_app(baseline) if baseline is not None else await _krm_app(args.state, args.policy)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((args.host, args.port))
    # Listening before uvicorn starts: connections made as soon as the port is printed wait in the backlog.
    sock.listen(2048)
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="off",
        ssl_certfile=args.tls_cert,
        ssl_keyfile=args.tls_key,
        timeout_keep_alive=60,
        # Watches stream until their timeout: on shutdown they are cut after this grace period.
        timeout_graceful_shutdown=1,
        backlog=2048,
    )
    print(f"listening on {sock.getsockname()[1]}", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


def serve_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m herder.bench.api serve")
    parser.add_argument("--state", default="memory://", help="the store URL (memory://, sqlite:///PATH)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    parser.add_argument("--baseline", help="JSON {path: file}: serve these files' bytes instead of the API")
    parser.add_argument("--policy", help="MODULE:CLASS of the access policy (default: allow all)")
    args = parser.parse_args(argv)
    baseline = None
    if args.baseline:
        baseline = {path: Path(file).read_bytes() for path, file in json.loads(args.baseline).items()}
    # uvloop, as ``uvicorn.run`` would pick it: the loop is made here so that the store is opened on it.
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_serve(args, baseline))
    return 0


@contextlib.contextmanager
def server_process(*args: str) -> Iterator[int]:
    """Run ``serve`` with ``args`` in a subprocess; yields its port and ends it (by PID) afterwards."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "herder.bench.api", "serve", *args], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("listening on "):
            raise RuntimeError(f"the server did not start (exit code {proc.wait(10)})")
        yield int(line.split()[-1])
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# the clients


class Connection:
    """One keep-alive HTTP/1.1 connection: just enough of a client to measure a server."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def request(
        self, method: str, path: str, body: bytes = b"", content_type: str = "application/json"
    ) -> bytes:
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
        if body:
            head += f"Content-Type: {content_type}\r\n"
        self.writer.write(head.encode() + b"\r\n" + body)
        status, headers = await self._head()
        if headers.get("transfer-encoding") == "chunked":
            raise RuntimeError("chunked response to a plain request")
        data = await self.reader.readexactly(int(headers.get("content-length", "0")))
        if status >= 300:
            raise RuntimeError(f"{method} {path}: {status} {data[:200]!r}")
        return data

    async def stream(self, path: str) -> None:
        """Start a streamed (chunked) response; read it with ``chunk``."""
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        await self._head()

    async def chunk(self) -> bytes:
        size = int((await self.reader.readline()).strip(), 16)
        data = await self.reader.readexactly(size + 2)
        return data[:-2]

    async def _head(self) -> tuple[int, dict[str, str]]:
        raw = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *lines = raw.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            key, sep, value = line.partition(":")
            if sep:
                headers[key.strip().lower()] = value.strip()
        return int(status_line.split()[1]), headers

    def close(self) -> None:
        self.writer.close()


async def _load(port: int, path: str, seconds: float) -> tuple[float, list[float]]:
    """``CLIENTS`` connections GETting ``path`` back to back for ``seconds``: requests/s and latencies.

    A first second of the same load is not counted: connections, caches and threads warm up in it.
    """
    conns = [await Connection.open(port) for _ in range(CLIENTS)]
    latencies: list[float] = []
    counting = False
    deadline = time.perf_counter() + 1.0

    async def client(conn: Connection) -> None:
        while (sent := time.perf_counter()) < deadline:
            await conn.request("GET", path)
            if counting:
                latencies.append(time.perf_counter() - sent)

    await asyncio.gather(*(client(c) for c in conns))
    counting = True
    start = time.perf_counter()
    deadline = start + seconds
    await asyncio.gather(*(client(c) for c in conns))
    elapsed = time.perf_counter() - start
    for conn in conns:
        conn.close()
    return len(latencies) / elapsed, latencies


def _emit_load(name: str, result: tuple[float, list[float]], baseline: tuple[float, list[float]]) -> None:
    rate, lat = result
    base_rate, base_lat = baseline
    emit(f"api.{name}.rate", rate, "req/s", baseline=base_rate, clients=CLIENTS)
    for p in (50, 99):
        emit(
            f"api.{name}.p{p}",
            percentile(lat, p) * 1000,
            "ms",
            baseline=percentile(base_lat, p) * 1000,
            higher_is_better=False,
            clients=CLIENTS,
        )


def _patch_body(name: str, data: str = "x" * 200) -> bytes:
    obj = {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "ConfigPatch",
        "metadata": {"name": name, "labels": {"herder.dev/cluster": "bench"}},
        "spec": {"data": data},
    }
    return json.dumps(obj).encode()


async def _fill(port: int, n: int) -> None:
    conns = [await Connection.open(port) for _ in range(8)]

    async def writer(k: int) -> None:
        for i in range(k, n, len(conns)):
            await conns[k].request("POST", GROUP_PATH, _patch_body(f"p{i:05d}"))

    await asyncio.gather(*(writer(k) for k in range(len(conns))))
    for conn in conns:
        conn.close()


async def _watch(port: int, events: int) -> tuple[float, list[float]]:
    """``CLIENTS`` watchers of ``events`` sequential updates: events/s delivered and latencies."""
    watchers = [await Connection.open(port) for _ in range(CLIENTS)]
    rv = json.loads(await watchers[0].request("GET", f"{GROUP_PATH}?limit=1"))["metadata"]["resourceVersion"]
    for conn in watchers:
        await conn.stream(f"{GROUP_PATH}?watch=1&resourceVersion={rv}&fieldSelector=metadata.name%3Dwatched")
    sent: dict[str, float] = {}
    latencies: list[float] = []

    async def watcher(conn: Connection) -> None:
        for _ in range(events):
            event = json.loads(await conn.chunk())
            latencies.append(time.perf_counter() - sent[event["object"]["spec"]["description"]])

    writer = await Connection.open(port)
    path = f"{GROUP_PATH}/watched"
    tasks = [asyncio.create_task(watcher(c)) for c in watchers]
    start = time.perf_counter()
    for i in range(events):
        sent[str(i)] = time.perf_counter()
        if i == 0:
            body = json.loads(_patch_body("watched"))
            body["spec"]["description"] = "0"
            await writer.request("POST", GROUP_PATH, json.dumps(body).encode())
        else:
            patch = json.dumps({"spec": {"description": str(i)}}).encode()
            await writer.request("PATCH", path, patch, "application/merge-patch+json")
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    for conn in (*watchers, writer):
        conn.close()
    return len(latencies) / elapsed, latencies


async def _run(args: argparse.Namespace, api_port: int, workdir: Path) -> None:
    await _fill(api_port, args.objects)
    probe = await Connection.open(api_port)
    payloads = {
        "/object": await probe.request("GET", f"{GROUP_PATH}/p00000"),
        "/list": await probe.request("GET", GROUP_PATH),
    }
    probe.close()
    files = {}
    for path, data in payloads.items():
        file = workdir / path.strip("/")
        file.write_bytes(data)
        files[path] = str(file)
    with server_process("--baseline", json.dumps(files)) as base_port:
        measure: list[tuple[str, str, str, float]] = [
            ("get", f"{GROUP_PATH}/p00000", "/object", args.seconds),
            ("list1000", GROUP_PATH, "/list", args.seconds),
        ]
        for name, path, base_path, seconds in measure:
            baseline = await _load(base_port, base_path, seconds)
            result = await _load(api_port, path, seconds)
            _emit_load(name, result, baseline)
    rate, lat = await _watch(api_port, args.events)
    emit("api.watch.delivery", rate, "events/s", watchers=CLIENTS)
    emit("api.watch.p50", percentile(lat, 50) * 1000, "ms", watchers=CLIENTS)
    emit("api.watch.p99", percentile(lat, 99) * 1000, "ms", watchers=CLIENTS)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m herder.bench api")
    parser.add_argument("--objects", type=int, default=1000, help="objects stored (the LIST size)")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long each load runs")
    parser.add_argument("--events", type=int, default=500, help="updates each watcher receives")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="herder-bench-api-") as tmp:
        workdir = Path(tmp)
        with (
            server_process("--state", f"sqlite:///{workdir / 'herder.db'}") as port,
            asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner,
        ):
            runner.run(_run(args, port, workdir))
    return 0


if __name__ == "__main__":
    sys.exit(serve_main(sys.argv[2:]) if sys.argv[1:2] == ["serve"] else main(sys.argv[1:]))
