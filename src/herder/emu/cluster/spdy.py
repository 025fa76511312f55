"""The server side of SPDY/3.1 (draft 3.1 of the SPDY protocol), as kube-apiserver and the kubelet speak it to
kubectl for exec, attach and port-forward: streams the client opens (SYN_STREAM, each with its headers: a
``streamtype``, a ``port``…), which the server accepts (SYN_REPLY), data both ways, half-closes (FIN),
resets, pings and GOAWAY. Header blocks are zlib-compressed with SPDY's dictionary, one compression context per
direction for the whole session.

Flow control is not enforced: Kubernetes' SPDY library (spdystream) does not do it either. A session is fed
the bytes it receives (``feed``) and writes through a callable, so that it runs on a raw TLS connection as on
a WebSocket tunnel (``SPDY/3.1+portforward.k8s.io``).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import zlib
from collections.abc import Callable

log = logging.getLogger(__name__)

VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN = 0x01
RST_PROTOCOL_ERROR, RST_INVALID_STREAM, RST_REFUSED_STREAM, RST_CANCEL = 1, 2, 3, 5
MAX_FRAME = 1 << 24
_HEADER = struct.Struct(">II")

_DICTIONARY_WORDS = [
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200_OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
]
_DICTIONARY_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)
DICTIONARY = (
    b"".join(struct.pack(">I", len(w)) + w.replace("_", " ").encode() for w in _DICTIONARY_WORDS)
    + _DICTIONARY_TAIL.encode()
)
"""The zlib dictionary of SPDY/3 header blocks (the spec's section 2.6.10.1): length-prefixed header names and
values, then common values run together."""


class ProtocolError(Exception):
    """The peer broke the protocol: the session ends."""


class Stream:
    """One stream a client opened: its headers, what it sends (until it half-closes), and our side of it."""

    def __init__(self, session: Session, stream_id: int, headers: dict[str, str], fin: bool) -> None:
        self.session = session
        self.id = stream_id
        self.headers = headers
        self._chunks: asyncio.Queue[bytes] = asyncio.Queue()
        self.remote_closed = False
        self.local_closed = False
        self.reset_by_peer = False
        if fin:
            self._remote_fin()

    def header(self, name: str) -> str:
        return self.headers.get(name.lower(), "")

    def _data(self, data: bytes) -> None:
        if data and not self.remote_closed:
            self._chunks.put_nowait(data)

    def _remote_fin(self) -> None:
        if not self.remote_closed:
            self.remote_closed = True
            self._chunks.put_nowait(b"")

    def _reset(self) -> None:
        self.reset_by_peer = True
        self.local_closed = True
        self._remote_fin()

    async def read(self) -> bytes:
        """The next bytes the client sent; empty once it half-closed (or reset) the stream."""
        if self.remote_closed and self._chunks.empty():
            return b""
        return await self._chunks.get()

    def write(self, data: bytes) -> None:
        if self.local_closed or not data:
            return
        for start in range(0, len(data), MAX_FRAME - 1):
            self.session.send_data(self.id, data[start : start + MAX_FRAME - 1], fin=False)

    def close(self) -> None:
        """Half-close our side (FIN): we send nothing more."""
        if not self.local_closed:
            self.local_closed = True
            self.session.send_data(self.id, b"", fin=True)

    def reset(self, status: int = RST_CANCEL) -> None:
        if not self.local_closed or not self.remote_closed:
            self.local_closed = True
            self._remote_fin()
            self.session.send_rst(self.id, status)


class Session:
    """One SPDY/3.1 session, server side: ``on_stream`` is called with each stream the client opens, once the
    server has accepted it."""

    def __init__(self, write: Callable[[bytes], None], on_stream: Callable[[Stream], None]) -> None:
        self._write = write
        self._on_stream = on_stream
        self._buffer = bytearray()
        self._inflate = zlib.decompressobj(zdict=DICTIONARY)
        self._deflate = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, 15, 8, zdict=DICTIONARY)
        self.streams: dict[int, Stream] = {}
        self._last_stream = 0
        self.closed = False

    # --- receiving ---

    def feed(self, data: bytes) -> None:
        """Take the bytes the client sent; raises ``ProtocolError`` when they break the protocol."""
        self._buffer += data
        while len(self._buffer) >= 8:
            first, second = _HEADER.unpack_from(self._buffer)
            length = second & 0xFFFFFF
            if len(self._buffer) < 8 + length:
                return
            payload = bytes(self._buffer[8 : 8 + length])
            del self._buffer[: 8 + length]
            flags = second >> 24
            if first & 0x80000000:
                version, kind = (first >> 16) & 0x7FFF, first & 0xFFFF
                if version != VERSION:
                    raise ProtocolError(f"SPDY version {version} is not supported")
                self._control(kind, flags, payload)
            else:
                self._stream_data(first & 0x7FFFFFFF, flags, payload)

    def _stream_data(self, stream_id: int, flags: int, payload: bytes) -> None:
        stream = self.streams.get(stream_id)
        if stream is None:
            self.send_rst(stream_id, RST_INVALID_STREAM)
            return
        stream._data(payload)
        if flags & FLAG_FIN:
            stream._remote_fin()
            self._forget(stream)

    def _control(self, kind: int, flags: int, payload: bytes) -> None:
        if kind == SYN_STREAM:
            if len(payload) < 10:
                raise ProtocolError("SYN_STREAM frame too short")
            stream_id = struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF
            headers = self._headers(payload[10:])
            if stream_id <= self._last_stream or stream_id % 2 == 0:
                self.send_rst(stream_id, RST_PROTOCOL_ERROR)
                return
            self._last_stream = stream_id
            stream = Stream(self, stream_id, headers, bool(flags & FLAG_FIN))
            self.streams[stream_id] = stream
            self._send_control(SYN_REPLY, 0, struct.pack(">I", stream_id) + self._header_block({}))
            self._on_stream(stream)
        elif kind == RST_STREAM:
            stream_id = struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF
            gone = self.streams.pop(stream_id, None)
            if gone is not None:
                gone._reset()
        elif kind == PING:
            self._send_control(PING, 0, payload[:4])
        elif kind == GOAWAY:
            self.closed = True
            for open_stream in list(self.streams.values()):
                open_stream._remote_fin()
        elif kind == HEADERS:
            stream_id = struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF
            self._headers(payload[4:])  # decoded all the same: the compression context goes on
            found = self.streams.get(stream_id)
            if found is not None and flags & FLAG_FIN:
                found._remote_fin()
                self._forget(found)
        elif kind in (SETTINGS, WINDOW_UPDATE, SYN_REPLY):
            return  # no flow control (see above); a server opens no streams that could be replied to
        else:
            log.debug("ignoring SPDY control frame of type %d", kind)

    def _headers(self, block: bytes) -> dict[str, str]:
        try:
            raw = self._inflate.decompress(block)
        except zlib.error as e:
            raise ProtocolError(f"bad header block: {e}") from None
        headers: dict[str, str] = {}
        try:
            (count,) = struct.unpack_from(">I", raw)
            offset = 4
            for _ in range(count):
                (size,) = struct.unpack_from(">I", raw, offset)
                name = raw[offset + 4 : offset + 4 + size].decode("latin-1").lower()
                offset += 4 + size
                (size,) = struct.unpack_from(">I", raw, offset)
                # Several values of one header are separated by NUL; the first is enough for Kubernetes'.
                headers[name] = raw[offset + 4 : offset + 4 + size].decode("latin-1").split("\0")[0]
                offset += 4 + size
        except struct.error:
            raise ProtocolError("truncated header block") from None
        return headers

    def _forget(self, stream: Stream) -> None:
        if stream.remote_closed and stream.local_closed:
            self.streams.pop(stream.id, None)

    # --- sending ---

    def _header_block(self, headers: dict[str, str]) -> bytes:
        raw = bytearray(struct.pack(">I", len(headers)))
        for name, value in headers.items():
            for part in (name.lower().encode(), value.encode()):
                raw += struct.pack(">I", len(part)) + part
        return self._deflate.compress(bytes(raw)) + self._deflate.flush(zlib.Z_SYNC_FLUSH)

    def _send_control(self, kind: int, flags: int, payload: bytes) -> None:
        if self.closed and kind != GOAWAY:
            return
        self._write(_HEADER.pack(0x80000000 | VERSION << 16 | kind, flags << 24 | len(payload)) + payload)

    def send_data(self, stream_id: int, data: bytes, *, fin: bool) -> None:
        if self.closed:
            return
        self._write(_HEADER.pack(stream_id, (FLAG_FIN if fin else 0) << 24 | len(data)) + data)
        stream = self.streams.get(stream_id)
        if fin and stream is not None:
            self._forget(stream)

    def send_rst(self, stream_id: int, status: int) -> None:
        self._send_control(RST_STREAM, 0, struct.pack(">II", stream_id, status))
        self.streams.pop(stream_id, None)

    def go_away(self) -> None:
        """Tell the client the session is over (no stream will be accepted any more)."""
        if not self.closed:
            self._send_control(GOAWAY, 0, struct.pack(">II", self._last_stream, 0))
            self.closed = True

    def lost(self) -> None:
        """The connection went: every stream ends."""
        self.closed = True
        for stream in list(self.streams.values()):
            stream._reset()
        self.streams.clear()
