"""herder's copies of SideroLink's Provision and EventSink APIs against siderolabs/siderolink's own
(``tests/data/siderolink/api.json``, see its README): every message and field herder declares is theirs,
with the same name, number, type, cardinality and proto3 presence, and each service's method takes and
returns the same messages, so what a real Talos machine sends to join and to report is what herder reads."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor

from herder.talos.api.siderolink import events_pb2, provision_pb2
from tests.data import DATA

UPSTREAM: dict[str, Any] = json.loads((DATA / "siderolink" / "api.json").read_text())
FILES = (provision_pb2.DESCRIPTOR, events_pb2.DESCRIPTOR)


def _fields(message: Descriptor) -> list[dict[str, Any]]:
    proto = descriptor_pb2.DescriptorProto()
    message.CopyToProto(proto)
    fields = []
    for field in proto.field:
        described: dict[str, Any] = {
            "name": field.name,
            "number": field.number,
            "type": descriptor_pb2.FieldDescriptorProto.Type.Name(field.type),
            "repeated": field.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
            "optional": field.proto3_optional,
        }
        if field.type_name:
            described["message"] = field.type_name.lstrip(".")
        fields.append(described)
    return fields


def _differences(ours: dict[str, list[dict[str, Any]]], theirs: dict[str, list[dict[str, Any]]]) -> list[str]:
    problems = []
    for name in sorted(ours.keys() | theirs.keys()):
        mine = {f["number"]: f for f in ours.get(name, [])}
        other = {f["number"]: f for f in theirs.get(name, [])}
        if name not in theirs or name not in ours:
            problems.append(f"{name}: only {'herder' if name in ours else 'SideroLink'} declares it")
            continue
        for number in sorted(mine.keys() | other.keys()):
            if mine.get(number) != other.get(number):
                problems.append(
                    f"{name} field {number}: herder's {mine.get(number)}, SideroLink's {other.get(number)}"
                )
    return problems


def test_the_messages_are_siderolink_s_field_for_field() -> None:
    assert {f.package for f in FILES} == set(UPSTREAM["files"].values())
    ours = {m.full_name: _fields(m) for f in FILES for m in f.message_types_by_name.values()}
    assert not _differences(ours, UPSTREAM["messages"])


def test_the_services_are_siderolink_s() -> None:
    services = {
        s.full_name: {
            m.name: {
                "input": m.input_type.full_name,
                "output": m.output_type.full_name,
                "client_streaming": m.client_streaming,
                "server_streaming": m.server_streaming,
            }
            for m in s.methods
        }
        for f in FILES
        for s in f.services_by_name.values()
    }
    assert services == UPSTREAM["services"]


def test_the_comparison_finds_a_difference() -> None:
    """A renumbered field, a lost ``optional`` and a missing message are each found."""
    theirs = UPSTREAM["messages"]
    wrong = json.loads(json.dumps(theirs))
    request = wrong["sidero.link.ProvisionRequest"]
    request[0]["number"] = 9
    request[2]["optional"] = False
    del wrong["sidero.link.ProvisionResponse"]
    problems = _differences(wrong, theirs)
    assert len(problems) == 4, problems  # field 1 gone, field 9 new, field 3 differs, a message missing
