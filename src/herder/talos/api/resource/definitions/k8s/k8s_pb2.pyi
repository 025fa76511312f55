from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StaticPodStatusSpec(_message.Message):
    __slots__ = ("pod_status",)
    POD_STATUS_FIELD_NUMBER: _ClassVar[int]
    pod_status: _struct_pb2.Struct
    def __init__(self, pod_status: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class KubeletSpecSpec(_message.Message):
    __slots__ = ("image", "args", "expected_nodename", "config")
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_NODENAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    image: str
    args: _containers.RepeatedScalarFieldContainer[str]
    expected_nodename: str
    config: _struct_pb2.Struct
    def __init__(self, image: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., expected_nodename: _Optional[str] = ..., config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...
