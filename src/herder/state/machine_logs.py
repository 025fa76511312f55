"""Machine logs kept by herder: each machine's service logs and kernel log, in a size-bounded ring of
segment files of its own in the data directory, so that they outlive a reboot, a reset or a machine that
vanished.

Why files and not the state store: a line is no object. Putting lines into etcd or SQLite would make every
line (hundreds a second across a fleet) a store write, and 500 machines at 5 MiB each would be 2.5 GB in
etcd, past its quota. A replica's data directory holds what that replica's collector followed; every
``herder serve`` follows every machine itself (``controllers.observability.machine_logs``), so each
replica answers for the whole fleet and losing one loses no logs. What survives a restart of the server is
every line written before it; a line is written to its segment as it arrives (one ``write`` per batch the
machine sent, no buffering in herder), so a ``kill -9`` loses nothing that reached herder.

Layout: ``ROOT/NAMESPACE/UUID/00000001.log``, ``00000002.log``… Each segment starts with a header line
naming its *scope* — the cluster the machine belonged to, and whether it was hidden or managed by the
platform, when its lines were written — and holds lines ``TIME<TAB>SOURCE<TAB>TEXT`` (TIME: seconds since
the epoch when herder received the line; SOURCE: a service's id, or ``kernel``; TEXT with backslash,
tab, carriage return and newline escaped). A change of scope starts a new segment, so that a reader is
shown only the lines of the clusters it may read. When a machine's segments together pass its budget, the
oldest go. A machine's ring is removed ``keep_gone`` after its last line once the machine no longer
exists.

Limits: times are herder's receipt times (the Talos API sends a service's lines without one), so a backlog
read when herder (re)connects carries the connection's time; a line longer than ``MAX_LINE`` is cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from herder.resources import Resource
from herder.resources.access import HIDDEN_LABEL, READ_ONLY_ANNOTATION
from herder.resources.machines import CLUSTER_LABEL

log = logging.getLogger(__name__)

KERNEL = "kernel"
"""The source name of a machine's kernel log (``talosctl dmesg``)."""
DEFAULT_BUDGET = 5 << 20
"""Bytes kept per machine unless ``herder serve --machine-log-bytes`` says otherwise."""
MIN_BUDGET = 256 << 10
MAX_LINE = 16 << 10
"""A longer line is cut (a segment, an eighth of the budget, always holds one)."""
RECENT = 3
"""Lines remembered per source: a backlog is matched against the last ones written."""
KEEP_GONE = 7 * 24 * 3600.0
"""Seconds a machine's logs are kept after its last line once the machine no longer exists."""
FOLLOW_QUEUE = 10_000
OPEN_FILES = 256
"""Rings whose newest segment is kept open between writes, the most recently written: a thousand machines'
logs must not hold a thousand file descriptors beside their connections (a process has a few thousand to
spend). A ring closed for room is opened again at its next line, appending to the same segment."""
"""Lines a follower may fall behind by before it is ended (a reader that does not read)."""
_HEADER = "#herder-machine-log v1 "
_SUFFIX = ".log"
_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_UNESCAPES = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}


@dataclass(frozen=True)
class LogScope:
    """Whose a machine's lines were when written: its namespace, its cluster ("" for none), whether it was
    hidden, and whether the platform managed it (a managed control plane: its Talos API, and so its logs,
    are for platform staff only)."""

    namespace: str
    cluster: str = ""
    hidden: bool = False
    managed: bool = False

    def to_json(self) -> str:
        return json.dumps(
            {
                "namespace": self.namespace,
                "cluster": self.cluster,
                "hidden": self.hidden,
                "managed": self.managed,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> LogScope:
        data = json.loads(text)
        return cls(
            str(data["namespace"]),
            str(data.get("cluster", "")),
            bool(data.get("hidden")),
            bool(data.get("managed")),
        )


def scope_of(machine: Resource) -> LogScope:
    """The scope a machine's lines are written in now."""
    labels, annotations = machine.metadata.labels, machine.metadata.annotations
    return LogScope(
        machine.namespace or "default",
        labels.get(CLUSTER_LABEL, ""),
        HIDDEN_LABEL in labels,
        READ_ONLY_ANNOTATION in annotations,
    )


@dataclass(frozen=True)
class LogEntry:
    at: float
    source: str
    text: str
    scope: LogScope

    def line(self, *, prefixed: bool, timestamps: bool) -> str:
        """The entry as one line of text: led by the RFC 3339 time herder received it (``timestamps``)
        and by ``SERVICE: `` (``prefixed``: a line among several services')."""
        text = f"{self.source}: {self.text}" if prefixed else self.text
        if not timestamps:
            return text + "\n"
        moment = datetime.fromtimestamp(self.at, UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond:06d}Z {text}\n"


Allowed = Callable[[LogScope], bool]


@dataclass
class _Segment:
    seq: int
    path: Path
    scope: LogScope
    size: int
    header: int = 0
    """The size of its header: a segment no larger holds no line yet."""


@dataclass
class _Ring:
    """One machine's segments, oldest first, and the open end of the newest."""

    directory: Path
    segments: list[_Segment]
    fd: int | None = None
    resumable: bool = False
    """Whether ``fd`` was closed only for room: the next line goes on in the same segment."""
    recent: dict[str, deque[str]] = field(default_factory=dict)
    """The last lines of each source, as written (for a collector to tell a backlog from new lines)."""
    recent_loaded: bool = False

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def escape(text: str) -> str:
    return text.translate(_ESCAPES)


def unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            out.append(_UNESCAPES.get(text[i + 1], text[i + 1]))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _parse(line: str, scope: LogScope) -> LogEntry | None:
    at, sep, rest = line.partition("\t")
    source, sep2, text = rest.partition("\t")
    if not (sep and sep2):
        return None
    try:
        moment = float(at)
    except ValueError:
        return None
    return LogEntry(moment, source, unescape(text), scope)


def _read_segment(segment: _Segment) -> list[LogEntry]:
    """A segment's lines (a torn last line, being written, is left out)."""
    try:
        data = segment.path.read_bytes()
    except FileNotFoundError:
        return []
    text = data.decode("utf-8", "replace")
    lines = text.split("\n")
    entries = []
    for line in lines[1:-1]:  # the header; the part after the last newline
        entry = _parse(line, segment.scope)
        if entry is not None:
            entries.append(entry)
    return entries


class MachineLogs:
    """The log rings of every machine under ``root``, ``budget`` bytes each."""

    def __init__(self, root: Path, budget: int = DEFAULT_BUDGET, *, keep_gone: float = KEEP_GONE) -> None:
        if budget < MIN_BUDGET:
            raise ValueError(f"--machine-log-bytes {budget}: at least {MIN_BUDGET} bytes a machine")
        self.root = root
        self.budget = budget
        # Eight segments to a ring: the oldest eighth goes at a time.
        self.segment_bytes = budget // 8
        self.keep_gone = keep_gone
        self._rings: dict[tuple[str, str], _Ring] = {}
        # The rings with an open segment, the least recently written first.
        self._open: OrderedDict[tuple[str, str], _Ring] = OrderedDict()
        self._followers: dict[tuple[str, str], set[asyncio.Queue[LogEntry | None]]] = {}
        self.lines_written = 0

    # --- writing ---

    def _ring(self, namespace: str, uuid: str) -> _Ring:
        key = (namespace, uuid)
        ring = self._rings.get(key)
        if ring is None:
            directory = self.root / _safe(namespace) / _safe(uuid)
            ring = self._rings[key] = _Ring(directory, _load_segments(directory))
        return ring

    def append(
        self, uuid: str, scope: LogScope, source: str, texts: Sequence[str], at: float | None = None
    ) -> None:
        """Lines of one source of the machine ``uuid``, received now (or ``at``), written at once."""
        if not texts:
            return
        moment = time.time() if at is None else at
        ring = self._ring(scope.namespace, uuid)
        kept = [t if len(t) <= MAX_LINE else t[:MAX_LINE] + "…" for t in texts]
        stamp = f"{moment:.6f}\t{escape(source)}\t"
        encoded = [f"{stamp}{escape(t)}\n".encode() for t in kept]
        current = ring.segments[-1] if ring.segments else None
        if current is not None and current.scope == scope and ring.fd is None and ring.resumable:
            with contextlib.suppress(FileNotFoundError):  # removed meanwhile: a new segment, then
                ring.fd = os.open(current.path, os.O_WRONLY | os.O_APPEND)
        if current is None or current.scope != scope or ring.fd is None:
            current = self._rotate(ring, scope)
        self._keep_open((scope.namespace, uuid), ring)
        start = 0
        while start < len(encoded):
            # As many lines as fit in the segment (at least one: a line is never split), in one write.
            end, size = start, 0
            while end < len(encoded) and (
                end == start or current.size + size + len(encoded[end]) <= self.segment_bytes
            ):
                size += len(encoded[end])
                end += 1
            if current.size + size > self.segment_bytes and current.size > current.header:
                current = self._rotate(ring, scope)
                continue
            assert ring.fd is not None
            os.write(ring.fd, b"".join(encoded[start:end]))
            current.size += size
            start = end
        while len(ring.segments) > 1 and ring.size > self.budget:
            oldest = ring.segments.pop(0)
            with contextlib.suppress(FileNotFoundError):
                oldest.path.unlink()
        recent = ring.recent.setdefault(source, deque(maxlen=RECENT))
        recent.extend(kept)
        self.lines_written += len(kept)
        followers = self._followers.get((scope.namespace, uuid))
        if followers:
            for text in kept:
                entry = LogEntry(moment, source, text, scope)
                for queue in list(followers):
                    try:
                        queue.put_nowait(entry)
                    except asyncio.QueueFull:
                        # A reader this far behind is ended rather than kept growing.
                        followers.discard(queue)
                        with contextlib.suppress(asyncio.QueueFull):
                            queue.get_nowait()
                            queue.put_nowait(None)

    def _keep_open(self, key: tuple[str, str], ring: _Ring) -> None:
        self._open[key] = ring
        self._open.move_to_end(key)
        while len(self._open) > OPEN_FILES:
            _, oldest = self._open.popitem(last=False)
            oldest.close()
            oldest.resumable = True

    def _rotate(self, ring: _Ring, scope: LogScope) -> _Segment:
        ring.close()
        ring.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        seq = ring.segments[-1].seq + 1 if ring.segments else 1
        path = ring.directory / f"{seq:08d}{_SUFFIX}"
        header = f"{_HEADER}{scope.to_json()}\n".encode()
        ring.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(ring.fd, header)
        segment = _Segment(seq, path, scope, len(header), len(header))
        ring.segments.append(segment)
        return segment

    def recent(self, namespace: str, uuid: str, source: str) -> list[str]:
        """The last few lines written of one source (``RECENT`` at most), from disk after a restart."""
        ring = self._ring(namespace, uuid)
        if not ring.recent_loaded:
            ring.recent_loaded = True
            found: dict[str, deque[str]] = {}
            # The newest two segments: a source silent for longer is read again from the machine.
            for segment in ring.segments[-2:]:
                for entry in _read_segment(segment):
                    found.setdefault(entry.source, deque(maxlen=RECENT)).append(entry.text)
            for name, lines in found.items():
                ring.recent.setdefault(name, lines)
        return list(ring.recent.get(source, ()))

    # --- reading ---

    def machines(self) -> list[tuple[str, str]]:
        """(namespace, uuid) of every machine with logs."""
        out: list[tuple[str, str]] = []
        if self.root.is_dir():
            for ns in sorted(self.root.iterdir()):
                if ns.is_dir():
                    out.extend((ns.name, m.name) for m in sorted(ns.iterdir()) if m.is_dir())
        return out

    def scopes(self, namespace: str, uuid: str) -> list[LogScope]:
        """The scopes of the machine's kept lines, oldest first, once each."""
        ring = self._rings.get((namespace, uuid))
        segments = (
            ring.segments if ring is not None else _load_segments(self.root / _safe(namespace) / _safe(uuid))
        )
        return list(dict.fromkeys(s.scope for s in segments))

    def entries(
        self,
        namespace: str,
        uuid: str,
        *,
        allowed: Allowed,
        sources: Iterable[str] | None = None,
        since: float | None = None,
        tail: int | None = None,
    ) -> list[LogEntry]:
        """The kept lines of the machine in the scopes ``allowed``, of ``sources`` (all but the kernel's:
        ``None``), received at ``since`` or later, the last ``tail`` of them. Reads files: call it off the
        event loop."""
        wanted = frozenset(sources) if sources is not None else None
        ring = self._rings.get((namespace, uuid))
        segments = (
            list(ring.segments)
            if ring is not None
            else _load_segments(self.root / _safe(namespace) / _safe(uuid))
        )
        picked: deque[LogEntry] = deque(maxlen=tail) if tail is not None and tail >= 0 else deque()
        if tail == 0:
            return []
        for segment in segments:
            if not allowed(segment.scope):
                continue
            for entry in _read_segment(segment):
                if wanted is None and entry.source == KERNEL:
                    continue
                if wanted is not None and entry.source not in wanted:
                    continue
                if since is not None and entry.at < since:
                    continue
                picked.append(entry)
        return list(picked)

    async def follow(
        self,
        namespace: str,
        uuid: str,
        *,
        allowed: Allowed,
        sources: Iterable[str] | None = None,
        since: float | None = None,
        tail: int | None = None,
    ) -> AsyncIterator[LogEntry]:
        """``entries``, then each new line as it is written, until the caller stops (or falls too far
        behind)."""
        wanted = frozenset(sources) if sources is not None else None
        queue: asyncio.Queue[LogEntry | None] = asyncio.Queue(FOLLOW_QUEUE)
        followers = self._followers.setdefault((namespace, uuid), set())
        followers.add(queue)
        try:
            kept = await asyncio.to_thread(
                self.entries, namespace, uuid, allowed=allowed, sources=wanted, since=since, tail=tail
            )
            last = kept[-1] if kept else None
            for shown in kept:
                yield shown
            while (entry := await queue.get()) is not None:
                if last is not None:
                    # Lines written while the backlog was read are in both: skip up to the last one shown.
                    if entry.at < last.at or (entry.at == last.at and entry != last):
                        continue
                    if entry == last:
                        last = None
                        continue
                    last = None
                if not allowed(entry.scope):
                    continue
                if (wanted is None and entry.source == KERNEL) or (
                    wanted is not None and entry.source not in wanted
                ):
                    continue
                yield entry
        finally:
            followers.discard(queue)
            if not followers:
                self._followers.pop((namespace, uuid), None)

    # --- retention ---

    def prune(self, existing: set[tuple[str, str]], now: float | None = None) -> list[tuple[str, str]]:
        """Remove the logs of machines not in ``existing`` whose last line is older than ``keep_gone``;
        returns the machines removed."""
        moment = time.time() if now is None else now
        removed = []
        for key in self.machines():
            if key in existing:
                continue
            directory = self.root / _safe(key[0]) / _safe(key[1])
            newest = max((p.stat().st_mtime for p in directory.glob(f"*{_SUFFIX}")), default=0.0)
            if moment - newest < self.keep_gone:
                continue
            ring = self._rings.pop(key, None)
            self._open.pop(key, None)
            if ring is not None:
                ring.close()
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(key)
        return removed

    def close(self) -> None:
        for ring in self._rings.values():
            ring.close()
        self._rings.clear()
        self._open.clear()
        for followers in self._followers.values():
            for queue in followers:
                with contextlib.suppress(asyncio.QueueFull):
                    queue.put_nowait(None)


def _safe(name: str) -> str:
    """A namespace or UUID as a file name: what Kubernetes names allow, nothing that climbs out."""
    cleaned = "".join(c for c in name if c.isalnum() or c in "-._")
    if not cleaned or cleaned in (".", ".."):
        raise ValueError(f"{name!r} is not a machine's name")
    return cleaned


def _load_segments(directory: Path) -> list[_Segment]:
    segments: list[_Segment] = []
    if not directory.is_dir():
        return segments
    for path in sorted(directory.glob(f"*{_SUFFIX}")):
        try:
            seq = int(path.stem)
            with path.open("rb") as f:
                first = f.readline().decode("utf-8", "replace")
            size = path.stat().st_size
        except (ValueError, OSError):
            continue
        if not first.startswith(_HEADER):
            log.warning("%s: not a machine log segment; ignored", path)
            continue
        try:
            scope = LogScope.from_json(first[len(_HEADER) :])
        except (ValueError, KeyError):
            log.warning("%s: unreadable header; ignored", path)
            continue
        segments.append(_Segment(seq, path, scope, size, len(first.encode())))
    return segments
