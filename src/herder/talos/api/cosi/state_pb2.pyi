from herder.talos.api.cosi import resource_pb2 as _resource_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CREATED: _ClassVar[EventType]
    UPDATED: _ClassVar[EventType]
    DESTROYED: _ClassVar[EventType]
    BOOTSTRAPPED: _ClassVar[EventType]
    ERRORED: _ClassVar[EventType]
    NOOP: _ClassVar[EventType]
CREATED: EventType
UPDATED: EventType
DESTROYED: EventType
BOOTSTRAPPED: EventType
ERRORED: EventType
NOOP: EventType

class Event(_message.Message):
    __slots__ = ("resource", "old", "error", "event_type", "bookmark")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    OLD_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    BOOKMARK_FIELD_NUMBER: _ClassVar[int]
    resource: _resource_pb2.Resource
    old: _resource_pb2.Resource
    error: str
    event_type: EventType
    bookmark: bytes
    def __init__(self, resource: _Optional[_Union[_resource_pb2.Resource, _Mapping]] = ..., old: _Optional[_Union[_resource_pb2.Resource, _Mapping]] = ..., error: _Optional[str] = ..., event_type: _Optional[_Union[EventType, str]] = ..., bookmark: _Optional[bytes] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("namespace", "type", "id", "options")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    type: str
    id: str
    options: GetOptions
    def __init__(self, namespace: _Optional[str] = ..., type: _Optional[str] = ..., id: _Optional[str] = ..., options: _Optional[_Union[GetOptions, _Mapping]] = ...) -> None: ...

class GetOptions(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("resource",)
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    resource: _resource_pb2.Resource
    def __init__(self, resource: _Optional[_Union[_resource_pb2.Resource, _Mapping]] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("namespace", "type", "options")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    type: str
    options: ListOptions
    def __init__(self, namespace: _Optional[str] = ..., type: _Optional[str] = ..., options: _Optional[_Union[ListOptions, _Mapping]] = ...) -> None: ...

class ListOptions(_message.Message):
    __slots__ = ("label_query", "id_query")
    LABEL_QUERY_FIELD_NUMBER: _ClassVar[int]
    ID_QUERY_FIELD_NUMBER: _ClassVar[int]
    label_query: _containers.RepeatedCompositeFieldContainer[_resource_pb2.LabelQuery]
    id_query: _resource_pb2.IDQuery
    def __init__(self, label_query: _Optional[_Iterable[_Union[_resource_pb2.LabelQuery, _Mapping]]] = ..., id_query: _Optional[_Union[_resource_pb2.IDQuery, _Mapping]] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("resource",)
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    resource: _resource_pb2.Resource
    def __init__(self, resource: _Optional[_Union[_resource_pb2.Resource, _Mapping]] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("namespace", "type", "id", "options", "api_version")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    type: str
    id: str
    options: WatchOptions
    api_version: int
    def __init__(self, namespace: _Optional[str] = ..., type: _Optional[str] = ..., id: _Optional[str] = ..., options: _Optional[_Union[WatchOptions, _Mapping]] = ..., api_version: _Optional[int] = ...) -> None: ...

class WatchOptions(_message.Message):
    __slots__ = ("bootstrap_contents", "tail_events", "label_query", "id_query", "aggregated", "start_from_bookmark", "bootstrap_bookmark")
    BOOTSTRAP_CONTENTS_FIELD_NUMBER: _ClassVar[int]
    TAIL_EVENTS_FIELD_NUMBER: _ClassVar[int]
    LABEL_QUERY_FIELD_NUMBER: _ClassVar[int]
    ID_QUERY_FIELD_NUMBER: _ClassVar[int]
    AGGREGATED_FIELD_NUMBER: _ClassVar[int]
    START_FROM_BOOKMARK_FIELD_NUMBER: _ClassVar[int]
    BOOTSTRAP_BOOKMARK_FIELD_NUMBER: _ClassVar[int]
    bootstrap_contents: bool
    tail_events: int
    label_query: _containers.RepeatedCompositeFieldContainer[_resource_pb2.LabelQuery]
    id_query: _resource_pb2.IDQuery
    aggregated: bool
    start_from_bookmark: bytes
    bootstrap_bookmark: bool
    def __init__(self, bootstrap_contents: _Optional[bool] = ..., tail_events: _Optional[int] = ..., label_query: _Optional[_Iterable[_Union[_resource_pb2.LabelQuery, _Mapping]]] = ..., id_query: _Optional[_Union[_resource_pb2.IDQuery, _Mapping]] = ..., aggregated: _Optional[bool] = ..., start_from_bookmark: _Optional[bytes] = ..., bootstrap_bookmark: _Optional[bool] = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: _containers.RepeatedCompositeFieldContainer[Event]
    def __init__(self, event: _Optional[_Iterable[_Union[Event, _Mapping]]] = ...) -> None: ...
