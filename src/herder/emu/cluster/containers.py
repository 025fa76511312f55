"""What runs inside an emulated pod's containers, as far as exec, logs, attach and port-forward can tell:

- ``run``: the commands a container answers to ``exec`` (``echo``, ``hostname``, ``cat /etc/hostname`` and
  ``cat`` of its input, ``true``, ``false``, ``pwd``, ``whoami``, ``id``, ``env``, ``sleep``, ``exit``, and
  ``sh -c``/``bash -c`` of a script of those, joined by ``;``, ``&&`` or ``||``); anything else is not found,
  as containerd reports it;
- ``Logs``: what each container writes: a first line when it starts (the output of its command when that is
  one of the above), then a line per request served on its ports, as a web server logs them;
- ``serve``: each port a container declares (``ports[].containerPort``) answers HTTP: 200 with a short text
  saying which pod, container and port answered, and the request line.

Logs live in memory (a bounded number of lines per container, of containers per cluster), as on a node whose
kubelet keeps them until the pod goes.
"""

from __future__ import annotations

import asyncio
import shlex
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import h11

LINES_KEPT = 1000
"""Lines kept per container (the oldest go first)."""
CONTAINERS_KEPT = 4096
"""Containers whose logs a cluster keeps (the least recently written go first)."""
NOT_FOUND = 127


@dataclass(frozen=True)
class Container:
    """One container of a running pod, as its processes see it."""

    pod: str
    namespace: str
    uid: str
    name: str
    image: str
    hostname: str
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    ports: frozenset[int]
    started: float
    """When it started (seconds since the epoch)."""

    @classmethod
    def of(cls, pod: dict[str, Any], spec: dict[str, Any], node_name: str) -> Container:
        meta, pod_spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        started = time.time()
        for cs in status.get("containerStatuses") or ():
            if cs.get("name") == spec["name"]:
                stamp = ((cs.get("state") or {}).get("running") or {}).get("startedAt")
                if stamp:
                    started = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
        return cls(
            pod=meta["name"],
            namespace=meta.get("namespace", ""),
            uid=meta.get("uid", ""),
            name=spec["name"],
            image=spec.get("image", ""),
            hostname=node_name if pod_spec.get("hostNetwork") else meta["name"],
            command=tuple(str(a) for a in [*(spec.get("command") or ()), *(spec.get("args") or ())]),
            env=tuple(
                (str(e["name"]), str(e.get("value", ""))) for e in spec.get("env") or () if "name" in e
            ),
            ports=frozenset(int(p["containerPort"]) for p in spec.get("ports") or () if "containerPort" in p),
            started=started,
        )


# --- exec ---

Write = Callable[[bytes], None]
Stdin = Callable[[], Awaitable[bytes]]
"""The next bytes of a command's input; empty at its end."""


@dataclass
class Process:
    """A command's input and output, and how it ended."""

    out: Write
    err: Write
    stdin: Stdin
    code: int = 0
    not_found: str = ""
    """The program that could not be started (then nothing ran)."""
    instant: bool = False
    """Take no time (``sleep`` returns at once): only what the command writes is wanted."""
    tty: bool = False
    """Its input is a terminal's keystrokes: a shell prompts and echoes them."""


async def _no_input() -> bytes:
    return b""


async def run(container: Container, argv: list[str], process: Process) -> None:
    """Run a command in the container (nothing runs for real: the container answers as one would); an
    interactive ``sh`` (no ``-c``) runs each line it reads."""
    shells = ("sh", "bash", "/bin/sh", "/bin/bash")
    if argv and argv[0] in shells and len(argv) >= 3 and argv[1] == "-c":
        await _script(container, argv[2], process)
    elif argv and argv[0] in shells and argv[1:] in ([], ["-i"]):
        await _shell(container, process)
    else:
        await _command(container, argv, process)


async def _shell(container: Container, process: Process) -> None:
    """A shell reading its input line by line; on a terminal it prompts, echoes what is typed, and knows
    backspace, ^C and ^D."""
    prompt = b"/ # " if process.tty else b""
    process.out(prompt)
    line = bytearray()
    while chunk := await process.stdin():
        if not process.tty:
            chunk = chunk.replace(b"\r\n", b"\n")
        for byte in chunk:
            key = bytes([byte])
            if key in (b"\r", b"\n"):
                if process.tty:
                    process.out(b"\n")
                words = line.decode(errors="replace").strip()
                line.clear()
                if words.split()[:1] == ["exit"]:
                    rest = words.split()[1:]
                    process.code = int(rest[0]) if rest and rest[0].isdigit() else process.code
                    return
                if words:
                    await _script(container, words, process)
                process.out(prompt)
            elif process.tty and key == b"\x03":
                line.clear()
                process.out(b"^C\n" + prompt)
            elif process.tty and key == b"\x04":
                if not line:
                    process.out(b"\n")
                    return
            elif process.tty and key in (b"\x7f", b"\x08"):
                if line:
                    del line[-1]
                    process.out(b"\x08 \x08")
            else:
                line += key
                if process.tty:
                    process.out(key)


async def _script(container: Container, script: str, process: Process) -> None:
    try:
        lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError as e:
        process.err(f"sh: syntax error: {e}\n".encode())
        process.code = 2
        return
    command: list[str] = []
    joiner = ";"
    for token in [*tokens, ";"]:
        if token not in (";", "&&", "||"):
            command.append(token)
            continue
        if command and (joiner == ";" or (joiner == "&&") == (process.code == 0)):
            command, target = _redirection(command, process)
            if command[0] == "exit":
                process.code = int(command[1]) if len(command) > 1 and command[1].isdigit() else process.code
                return
            await _command(container, command, target)
            process.code, process.not_found = target.code, target.not_found
            if process.not_found:
                process.err(f"sh: {process.not_found}: not found\n".encode())
                process.not_found, process.code = "", NOT_FOUND
        command, joiner = [], token


_REDIRECTIONS = ((">", "&", "2"), ("1>", "&", "2"), ("2>", "&", "1"))
"""``>&2``, ``1>&2``, ``2>&1`` as the script's tokens: the only redirections known."""


def _redirection(command: list[str], process: Process) -> tuple[list[str], Process]:
    """A command without its redirection, and the process it writes through."""
    tail = tuple(command[-3:])
    if tail in _REDIRECTIONS and len(command) > 3:
        swapped = replace(process, out=process.err) if tail[0] != "2>" else replace(process, err=process.out)
        return command[:-3], swapped
    return command, process


async def _command(container: Container, argv: list[str], process: Process) -> None:
    if not argv:
        return
    program, args = argv[0].rsplit("/", 1)[-1], argv[1:]
    process.code = 0
    if program == "echo":
        newline = not (args and args[0] == "-n")
        text = " ".join(args if newline else args[1:])
        process.out((text + ("\n" if newline else "")).encode())
    elif program == "hostname":
        process.out(f"{container.hostname}\n".encode())
    elif program == "cat":
        if not args:
            while chunk := await process.stdin():
                process.out(chunk)
        for path in args:
            content = _file(container, path)
            if content is None:
                process.err(f"cat: can't open '{path}': No such file or directory\n".encode())
                process.code = 1
            else:
                process.out(content)
    elif program in ("true", ":"):
        pass
    elif program == "false":
        process.code = 1
    elif program == "pwd":
        process.out(b"/\n")
    elif program == "whoami":
        process.out(b"root\n")
    elif program == "id":
        process.out(b"uid=0(root) gid=0(root) groups=0(root)\n")
    elif program in ("env", "printenv"):
        process.out("".join(f"{k}={v}\n" for k, v in _environment(container)).encode())
    elif program == "sleep":
        try:
            seconds = float(args[0]) if args else 0
            if not process.instant:
                await asyncio.sleep(seconds)
        except ValueError:
            process.err(f"sleep: invalid number '{args[0]}'\n".encode())
            process.code = 1
    else:
        process.not_found = argv[0]


def _environment(container: Container) -> list[tuple[str, str]]:
    return [
        ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
        ("HOSTNAME", container.hostname),
        *container.env,
        ("HOME", "/root"),
    ]


def _file(container: Container, path: str) -> bytes | None:
    if path == "/etc/hostname":
        return f"{container.hostname}\n".encode()
    if path == "/etc/hosts":
        return f"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\t{container.hostname}\n".encode()
    return None


async def first_line(container: Container) -> str:
    """What a container writes when it starts: its command's output when it is one of those known (and
    succeeds), or else that it runs."""
    if container.command:
        written = bytearray()
        process = Process(written.extend, written.extend, _no_input, instant=True)
        await run(container, list(container.command), process)
        if not process.not_found and process.code == 0 and written:
            return written.decode(errors="replace").rstrip("\n")
    return f"{container.image or container.name}: running as {container.hostname}"


# --- logs ---


class _Log:
    def __init__(self) -> None:
        self.lines: deque[tuple[float, str]] = deque(maxlen=LINES_KEPT)
        self.written = 0
        """Lines written so far (the first kept one is ``written - len(lines)``)."""
        self.wake = asyncio.Event()

    def append(self, line: str) -> None:
        self.lines.append((time.time(), line))
        self.written += 1
        self.wake.set()
        self.wake = asyncio.Event()


class Logs:
    """The logs of one cluster's containers, by pod uid and container name."""

    def __init__(self) -> None:
        self._logs: OrderedDict[tuple[str, str], _Log] = OrderedDict()

    def _log(self, container: Container) -> _Log:
        key = (container.uid, container.name)
        log = self._logs.get(key)
        if log is None:
            log = self._logs[key] = _Log()
            if len(self._logs) > CONTAINERS_KEPT:
                self._logs.popitem(last=False)
        self._logs.move_to_end(key)
        return log

    def write(self, container: Container, line: str) -> None:
        self._log(container).append(line)

    async def lines(self, container: Container) -> tuple[list[tuple[float, str]], int]:
        """The container's lines (time, text) from its start, and how many it wrote (to follow on from)."""
        log = self._log(container)
        return [(container.started, await first_line(container)), *log.lines], log.written

    async def follow(
        self, container: Container, written: int, alive: Callable[[], Awaitable[bool]]
    ) -> AsyncIterator[tuple[float, str]]:
        """Each line the container writes after its first ``written``, until ``alive()`` says it is gone."""
        log = self._log(container)
        index = written
        while True:
            while index < log.written:
                first = log.written - len(log.lines)
                index = max(index, first)
                yield log.lines[index - first]
                index += 1
            try:
                async with asyncio.timeout(1.0):
                    await log.wake.wait()
            except TimeoutError:
                if not await alive():
                    return


# --- the ports it serves ---


def _body(container: Container, port: int, request: h11.Request) -> bytes:
    line = f"{request.method.decode()} {request.target.decode(errors='replace')}"
    return f"{container.pod} ({container.name}, port {port}) answers {line}\n".encode()


class PortServer:
    """One connection to a port a container serves: bytes in, an HTTP server's answers out."""

    def __init__(self, container: Container, port: int, logs: Logs, client: str = "127.0.0.1") -> None:
        self.container = container
        self.port = port
        self.logs = logs
        self.client = client
        self._http = h11.Connection(h11.SERVER)

    def receive(self, data: bytes) -> tuple[bytes, bool]:
        """Take bytes the client sent (empty: it closed its side); the answer, and whether to close."""
        self._http.receive_data(data)
        out = bytearray()
        while True:
            try:
                event = self._http.next_event()
            except h11.RemoteProtocolError:
                answer = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
                return bytes(out) + answer, True
            if event is h11.NEED_DATA:
                return bytes(out), False
            if isinstance(event, h11.Request):
                body = _body(self.container, self.port, event)
                headers = [("content-type", "text/plain; charset=utf-8"), ("content-length", str(len(body)))]
                out += self._http.send(h11.Response(status_code=200, headers=headers)) or b""
                out += self._http.send(h11.Data(data=body)) or b""
                out += self._http.send(h11.EndOfMessage()) or b""
                self._access_log(event, len(body))
            elif isinstance(event, h11.ConnectionClosed) or self._http.our_state is h11.MUST_CLOSE:
                return bytes(out), True
            elif self._http.our_state is h11.DONE and self._http.their_state is h11.DONE:
                self._http.start_next_cycle()

    def _access_log(self, request: h11.Request, size: int) -> None:
        headers = dict(request.headers)
        agent = headers.get(b"user-agent", b"-").decode(errors="replace")
        when = datetime.now(UTC).strftime("%d/%b/%Y:%H:%M:%S +0000")
        line = f"{request.method.decode()} {request.target.decode(errors='replace')} HTTP/{request.http_version.decode()}"
        self.logs.write(self.container, f'{self.client} - - [{when}] "{line}" 200 {size} "-" "{agent}"')
