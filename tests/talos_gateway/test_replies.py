"""One-to-many replies marked on the wire as apid marks them: decoded with the machine API's own messages,
every message names its node, and a node's failure reads as a message holding only its error."""

from __future__ import annotations

import grpc
import pytest

from herder.talos.api.common import common_pb2
from herder.talos.api.machine import machine_pb2 as pb
from herder.talos_gateway.replies import MalformedReply, failure, go_error, with_hostname


def test_each_message_of_a_unary_reply_names_its_node() -> None:
    reply = pb.ServiceListResponse(
        messages=[
            pb.ServiceList(services=[pb.ServiceInfo(id="etcd", state="Running")]),
            pb.ServiceList(metadata=common_pb2.Metadata(hostname="set-by-the-node")),
        ]
    ).SerializeToString()
    marked = pb.ServiceListResponse.FromString(with_hostname(reply, "10.5.0.2", streaming=False))
    assert [m.metadata.hostname for m in marked.messages] == ["10.5.0.2", "10.5.0.2"]
    assert marked.messages[0].services[0].id == "etcd"


def test_several_nodes_replies_concatenated_are_one_reply() -> None:
    def version(tag: str, node: str) -> bytes:
        raw = pb.VersionResponse(messages=[pb.Version(version=pb.VersionInfo(tag=tag))]).SerializeToString()
        return with_hostname(raw, node, streaming=False)

    joined = version("v1.13.9", "a") + failure("b", grpc.StatusCode.UNAVAILABLE, "no route", streaming=False)
    reply = pb.VersionResponse.FromString(joined + version("v1.12.1", "c"))
    assert [(m.metadata.hostname, m.version.tag) for m in reply.messages] == [
        ("a", "v1.13.9"),
        ("b", ""),
        ("c", "v1.12.1"),
    ]
    failed = reply.messages[1].metadata
    assert failed.error == "rpc error: code = Unavailable desc = no route"
    assert failed.status.code == 14 and failed.status.message == "no route"


def test_a_reply_without_messages_still_names_its_node() -> None:
    marked = pb.EtcdLeaveClusterResponse.FromString(with_hostname(b"", "n1", streaming=False))
    assert [m.metadata.hostname for m in marked.messages] == ["n1"]


def test_streamed_messages_name_their_node() -> None:
    event = pb.Event(id="1", metadata=common_pb2.Metadata(hostname="set-by-the-node")).SerializeToString()
    assert pb.Event.FromString(with_hostname(event, "n2", streaming=True)).metadata.hostname == "n2"
    refused = pb.Event.FromString(failure("n3", grpc.StatusCode.NOT_FOUND, "gone", streaming=True))
    assert refused.metadata.hostname == "n3" and refused.metadata.error.endswith("desc = gone")


def test_go_names_its_codes_in_camel_case() -> None:
    assert go_error(grpc.StatusCode.PERMISSION_DENIED, "x") == "rpc error: code = PermissionDenied desc = x"
    assert go_error(grpc.StatusCode.CANCELLED, "x").startswith("rpc error: code = Canceled ")


def test_a_reply_that_is_not_protobuf_is_refused() -> None:
    for garbage in (b"\x0a\x05ab", b"\xff", b"\x0b"):
        with pytest.raises(MalformedReply):
            with_hostname(garbage, "n", streaming=False)
