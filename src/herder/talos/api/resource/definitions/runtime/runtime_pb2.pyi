from herder.talos.api.resource.definitions.enums import enums_pb2 as _enums_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MachineStatusSpec(_message.Message):
    __slots__ = ("stage", "status")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    stage: _enums_pb2.RuntimeMachineStage
    status: MachineStatusStatus
    def __init__(self, stage: _Optional[_Union[_enums_pb2.RuntimeMachineStage, str]] = ..., status: _Optional[_Union[MachineStatusStatus, _Mapping]] = ...) -> None: ...

class MachineStatusStatus(_message.Message):
    __slots__ = ("ready", "unmet_conditions")
    READY_FIELD_NUMBER: _ClassVar[int]
    UNMET_CONDITIONS_FIELD_NUMBER: _ClassVar[int]
    ready: bool
    unmet_conditions: _containers.RepeatedCompositeFieldContainer[UnmetCondition]
    def __init__(self, ready: _Optional[bool] = ..., unmet_conditions: _Optional[_Iterable[_Union[UnmetCondition, _Mapping]]] = ...) -> None: ...

class UnmetCondition(_message.Message):
    __slots__ = ("name", "reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    reason: str
    def __init__(self, name: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class VersionSpec(_message.Message):
    __slots__ = ("version", "name")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    version: str
    name: str
    def __init__(self, version: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...
