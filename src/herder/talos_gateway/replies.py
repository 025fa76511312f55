"""The replies of a one-to-many call (``nodes`` metadata), marked as apid marks them, on the raw bytes.

Every reply message of the machine API starts with ``common.Metadata metadata = 1``, and a unary reply is
``repeated Message messages = 1``. A protobuf message is the concatenation of its fields, and a field seen
twice is merged, so apid (and herder) add the node's name to a reply by appending a metadata field to
each message, without decoding it; a node that failed answers a message holding only metadata with the
error, and the replies of all nodes, concatenated, are one reply with all their messages.
"""

from __future__ import annotations

import grpc

from herder.talos.api.common import common_pb2

_MESSAGES = 1
_LEN = 2
_VARINT, _I64, _I32 = 0, 1, 5


class MalformedReply(ValueError):
    """A node's reply that is not protobuf as the machine API sends it."""


def go_error(code: grpc.StatusCode, message: str) -> str:
    """A gRPC status as Go's gRPC prints it, which is how apid writes a node's error into its metadata."""
    words = "Canceled" if code is grpc.StatusCode.CANCELLED else code.name.title().replace("_", "")
    return f"rpc error: code = {words} desc = {message}"


def failure(hostname: str, code: grpc.StatusCode, message: str, *, streaming: bool) -> bytes:
    """The message apid answers in place of a node's reply when the call to that node failed."""
    metadata = common_pb2.Metadata(
        hostname=hostname,
        error=go_error(code, message),
        status=common_pb2.Status(code=code.value[0], message=message),
    )
    empty = common_pb2.Empty(metadata=metadata)
    if streaming:
        return bytes(empty.SerializeToString())
    return bytes(common_pb2.EmptyResponse(messages=[empty]).SerializeToString())


def with_hostname(reply: bytes, hostname: str, *, streaming: bool) -> bytes:
    """A node's reply with the node's name in the metadata of each of its messages."""
    metadata = bytes(common_pb2.Empty(metadata=common_pb2.Metadata(hostname=hostname)).SerializeToString())
    if streaming:
        return reply + metadata
    out = bytearray()
    marked = False
    position = 0
    while position < len(reply):
        start = position
        tag, position = _varint(reply, position)
        field, wire_type = tag >> 3, tag & 7
        if wire_type == _LEN:
            length, position = _varint(reply, position)
            end = position + length
            if end > len(reply):
                raise MalformedReply("a field runs past the end of the reply")
            if field == _MESSAGES:
                out += _put_varint(tag) + _put_varint(length + len(metadata))
                out += reply[position:end] + metadata
                marked = True
            else:
                out += reply[start:end]
            position = end
        elif wire_type == _VARINT:
            _, position = _varint(reply, position)
            out += reply[start:position]
        elif wire_type in (_I64, _I32):
            position += 8 if wire_type == _I64 else 4
            if position > len(reply):
                raise MalformedReply("a field runs past the end of the reply")
            out += reply[start:position]
        else:
            raise MalformedReply(f"unexpected wire type {wire_type}")
    if not marked:
        # A reply without messages still tells which node answered.
        out += _put_varint(_MESSAGES << 3 | _LEN) + _put_varint(len(metadata)) + metadata
    return bytes(out)


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while position < len(data):
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
        if shift > 63:
            break
    raise MalformedReply("a truncated or overlong varint")


def _put_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
