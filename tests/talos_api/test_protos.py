"""herder's Talos protos against Talos's own (``tests/data/talos/proto``, compiled here with grpcio-tools):
every message, field, enum value and method herder declares is Talos's, with the same name, number, type,
cardinality and streaming, so that what herder sends and reads is what Talos sends and reads. herder may
leave out what it does not use; it may not differ in anything it keeps."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import grpc_tools
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import (
    Descriptor,
    EnumDescriptor,
    FieldDescriptor,
    FileDescriptor,
    ServiceDescriptor,
)

from herder.talos.api.common import common_pb2
from herder.talos.api.machine import machine_pb2
from herder.talos.api.resource.config import config_pb2
from herder.talos.api.resource.definitions.block import block_pb2
from herder.talos.api.resource.definitions.cluster import cluster_pb2
from herder.talos.api.resource.definitions.enums import enums_pb2
from herder.talos.api.resource.definitions.extensions import extensions_pb2
from herder.talos.api.resource.definitions.hardware import hardware_pb2
from herder.talos.api.resource.definitions.k8s import k8s_pb2
from herder.talos.api.resource.definitions.network import network_pb2
from herder.talos.api.resource.definitions.runtime import runtime_pb2
from herder.talos.api.resource.definitions.v1alpha1 import v1alpha1_pb2
from herder.talos.api.storage import storage_pb2
from tests.data import TALOS_PROTOS

HERDER: tuple[ModuleType, ...] = (
    common_pb2,
    machine_pb2,
    block_pb2,
    cluster_pb2,
    config_pb2,
    enums_pb2,
    extensions_pb2,
    hardware_pb2,
    k8s_pb2,
    network_pb2,
    runtime_pb2,
    v1alpha1_pb2,
    storage_pb2,
)
"""herder's generated protos that stand for Talos's."""

STAND_INS = {"common.Status": "google.rpc.Status"}
"""herder's own copies of messages Talos imports from elsewhere (compared field by field all the same)."""

HERDER_ONLY = {"common.Empty", "common.EmptyResponse"}
"""Messages only herder declares: how a proxy reads any reply's metadata (every Talos reply message starts
with ``common.Metadata metadata = 1``), checked below against a reply Talos declares."""


@pytest.fixture(scope="module")
def talos(tmp_path_factory: pytest.TempPathFactory) -> descriptor_pool.DescriptorPool:
    """Talos's protos, compiled into a pool of their own (their names are herder's: one pool cannot hold both)."""
    out = tmp_path_factory.mktemp("talos-protos") / "talos.desc"
    sources = sorted(str(p.relative_to(TALOS_PROTOS)) for p in TALOS_PROTOS.rglob("*.proto"))
    includes = Path(grpc_tools.__file__).parent / "_proto"
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{TALOS_PROTOS}", f"-I{includes}",
         f"--descriptor_set_out={out}", "--include_imports", *sources],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    return pool


def _messages(file: FileDescriptor) -> Iterator[Descriptor]:
    def nested(message: Descriptor) -> Iterator[Descriptor]:
        yield message
        for inner in message.nested_types:
            yield from nested(inner)

    for message in file.message_types_by_name.values():
        yield from nested(message)


def _compare_enum(ours: EnumDescriptor, theirs: EnumDescriptor, where: str) -> list[str]:
    values = {v.name: v.number for v in theirs.values}
    return [
        f"{where}: enum value {v.name} = {v.number} is not Talos's ({values.get(v.name)})"
        for v in ours.values
        if values.get(v.name) != v.number
    ]


def _compare(ours: Descriptor, theirs: Descriptor, where: str, seen: set[tuple[str, str]]) -> list[str]:
    """How ``ours`` differs from Talos's message ``theirs``, field by field and through the messages and
    enums its fields refer to."""
    if (ours.full_name, theirs.full_name) in seen:
        return []
    seen.add((ours.full_name, theirs.full_name))
    problems = []
    for field in ours.fields:
        path = f"{where}.{field.name}"
        other: FieldDescriptor | None = theirs.fields_by_number.get(field.number)
        if other is None:
            problems.append(f"{path} = {field.number}: Talos has no field {field.number}")
            continue
        if (other.name, other.type, other.is_repeated) != (field.name, field.type, field.is_repeated):
            problems.append(
                f"{path} = {field.number}: Talos's is {other.name} (type {other.type}, repeated "
                f"{other.is_repeated}), herder's type {field.type}, repeated {field.is_repeated}"
            )
            continue
        if field.message_type is not None:
            problems += _compare(field.message_type, other.message_type, path, seen)
        if field.enum_type is not None:
            problems += _compare_enum(field.enum_type, other.enum_type, path)
    return problems


def _theirs(pool: descriptor_pool.DescriptorPool, name: str) -> Descriptor | None:
    try:
        return pool.FindMessageTypeByName(STAND_INS.get(name, name))
    except KeyError:
        return None


def test_every_message_herder_declares_is_talos_s_field_for_field(
    talos: descriptor_pool.DescriptorPool,
) -> None:
    problems: list[str] = []
    compared = 0
    for module in HERDER:
        for message in _messages(module.DESCRIPTOR):
            if message.full_name in HERDER_ONLY:
                continue
            theirs = _theirs(talos, message.full_name)
            if theirs is None:
                problems.append(f"{message.full_name}: Talos has no such message")
                continue
            problems += _compare(message, theirs, message.full_name, set())
            compared += 1
        for enum in module.DESCRIPTOR.enum_types_by_name.values():
            problems += _compare_enum(enum, talos.FindEnumTypeByName(enum.full_name), enum.full_name)
    assert not problems, "\n".join(problems)
    assert compared > 100  # the machine API's messages are among them


def test_herder_s_own_reply_shape_fits_every_talos_reply(talos: descriptor_pool.DescriptorPool) -> None:
    """``common.EmptyResponse`` reads any unary reply as its messages' metadata: each Talos reply is
    ``repeated M messages = 1`` with ``common.Metadata metadata = 1`` in M."""
    service = talos.FindServiceByName("machine.MachineService")
    for method in service.methods:
        reply = method.output_type
        if method.server_streaming:
            continue
        messages = reply.fields_by_number[1]
        assert messages.name == "messages" and messages.is_repeated, method.name
        metadata = messages.message_type.fields_by_number[1]
        assert metadata.message_type.full_name == "common.Metadata", method.name
    assert not _compare(
        common_pb2.EmptyResponse.DESCRIPTOR.fields[0].message_type.fields[0].message_type,
        talos.FindMessageTypeByName("common.Metadata"),
        "common.Empty.metadata",
        set(),
    )


@pytest.mark.parametrize(
    "ours",
    [
        machine_pb2.DESCRIPTOR.services_by_name["MachineService"],
        storage_pb2.DESCRIPTOR.services_by_name["StorageService"],
    ],
    ids=lambda service: service.full_name,
)
def test_every_method_herder_declares_is_talos_s(
    talos: descriptor_pool.DescriptorPool, ours: ServiceDescriptor
) -> None:
    theirs = talos.FindServiceByName(ours.full_name)
    problems = []
    for method in ours.methods:
        other = theirs.methods_by_name.get(method.name)
        if other is None:
            problems.append(f"{method.name}: Talos has no such method")
            continue
        shape = (method.client_streaming, method.server_streaming)
        if shape != (other.client_streaming, other.server_streaming):
            problems.append(
                f"{method.name}: streams {shape}, Talos's {other.client_streaming, other.server_streaming}"
            )
        for side, mine, talos_side in (
            ("request", method.input_type, other.input_type),
            ("reply", method.output_type, other.output_type),
        ):
            if mine.full_name != talos_side.full_name:
                problems.append(f"{method.name}: {side} {mine.full_name}, Talos's {talos_side.full_name}")
            problems += _compare(mine, talos_side, f"{method.name} {side}", set())
    assert not problems, "\n".join(problems)


def test_the_comparison_finds_a_difference(talos: descriptor_pool.DescriptorPool) -> None:
    """A field herder got wrong is found (what the tests above rely on)."""
    wrong = descriptor_pb2.FileDescriptorProto(
        name="wrong.proto",
        package="machine",
        message_type=[
            descriptor_pb2.DescriptorProto(
                name="LoadAvg",
                field=[
                    descriptor_pb2.FieldDescriptorProto(
                        name="load1", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_FLOAT,
                        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
                    ),
                    descriptor_pb2.FieldDescriptorProto(
                        name="load99", number=9, type=descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE,
                        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
                    ),
                ],
            )
        ],
    )  # fmt: skip
    pool = descriptor_pool.DescriptorPool()
    pool.Add(wrong)
    problems = _compare(
        pool.FindMessageTypeByName("machine.LoadAvg"), _theirs(talos, "machine.LoadAvg"), "x", set()
    )  # type: ignore[arg-type]
    assert len(problems) == 2 and "load1" in problems[0] and "no field 9" in problems[1]
