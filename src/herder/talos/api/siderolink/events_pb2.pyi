from google.protobuf import any_pb2 as _any_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EventRequest(_message.Message):
    __slots__ = ("data", "id", "actor_id")
    DATA_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    data: _any_pb2.Any
    id: str
    actor_id: str
    def __init__(self, data: _Optional[_Union[_any_pb2.Any, _Mapping]] = ..., id: _Optional[str] = ..., actor_id: _Optional[str] = ...) -> None: ...

class EventResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
