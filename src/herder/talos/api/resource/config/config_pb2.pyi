from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MachineType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNKNOWN: _ClassVar[MachineType]
    INIT: _ClassVar[MachineType]
    CONTROL_PLANE: _ClassVar[MachineType]
    WORKER: _ClassVar[MachineType]
UNKNOWN: MachineType
INIT: MachineType
CONTROL_PLANE: MachineType
WORKER: MachineType

class MachineTypeSpec(_message.Message):
    __slots__ = ("machine_type",)
    MACHINE_TYPE_FIELD_NUMBER: _ClassVar[int]
    machine_type: MachineType
    def __init__(self, machine_type: _Optional[_Union[MachineType, str]] = ...) -> None: ...
