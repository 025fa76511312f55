from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Code(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FATAL: _ClassVar[Code]
    LOCKED: _ClassVar[Code]
    CANCELED: _ClassVar[Code]

class ContainerDriver(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONTAINERD: _ClassVar[ContainerDriver]
    CRI: _ClassVar[ContainerDriver]
FATAL: Code
LOCKED: Code
CANCELED: Code
CONTAINERD: ContainerDriver
CRI: ContainerDriver

class Error(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: Code
    message: str
    def __init__(self, code: _Optional[_Union[Code, str]] = ..., message: _Optional[str] = ...) -> None: ...

class Status(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class Metadata(_message.Message):
    __slots__ = ("hostname", "error", "status")
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    error: str
    status: Status
    def __init__(self, hostname: _Optional[str] = ..., error: _Optional[str] = ..., status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class Empty(_message.Message):
    __slots__ = ("metadata",)
    METADATA_FIELD_NUMBER: _ClassVar[int]
    metadata: Metadata
    def __init__(self, metadata: _Optional[_Union[Metadata, _Mapping]] = ...) -> None: ...

class EmptyResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Empty]
    def __init__(self, messages: _Optional[_Iterable[_Union[Empty, _Mapping]]] = ...) -> None: ...

class Data(_message.Message):
    __slots__ = ("metadata", "bytes")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    metadata: Metadata
    bytes: bytes
    def __init__(self, metadata: _Optional[_Union[Metadata, _Mapping]] = ..., bytes: _Optional[bytes] = ...) -> None: ...

class NetIPPrefix(_message.Message):
    __slots__ = ("ip", "prefix_length")
    IP_FIELD_NUMBER: _ClassVar[int]
    PREFIX_LENGTH_FIELD_NUMBER: _ClassVar[int]
    ip: bytes
    prefix_length: int
    def __init__(self, ip: _Optional[bytes] = ..., prefix_length: _Optional[int] = ...) -> None: ...

class NetIP(_message.Message):
    __slots__ = ("ip",)
    IP_FIELD_NUMBER: _ClassVar[int]
    ip: bytes
    def __init__(self, ip: _Optional[bytes] = ...) -> None: ...
