from google.protobuf import empty_pb2 as _empty_pb2
from herder.talos.api.common import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Disk(_message.Message):
    __slots__ = ("size", "model", "device_name", "name", "serial", "modalias", "uuid", "wwid", "type", "bus_path", "system_disk", "subsystem", "readonly")
    class DiskType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNKNOWN: _ClassVar[Disk.DiskType]
        SSD: _ClassVar[Disk.DiskType]
        HDD: _ClassVar[Disk.DiskType]
        NVME: _ClassVar[Disk.DiskType]
        SD: _ClassVar[Disk.DiskType]
        CD: _ClassVar[Disk.DiskType]
    UNKNOWN: Disk.DiskType
    SSD: Disk.DiskType
    HDD: Disk.DiskType
    NVME: Disk.DiskType
    SD: Disk.DiskType
    CD: Disk.DiskType
    SIZE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEVICE_NAME_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SERIAL_FIELD_NUMBER: _ClassVar[int]
    MODALIAS_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    WWID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    BUS_PATH_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_DISK_FIELD_NUMBER: _ClassVar[int]
    SUBSYSTEM_FIELD_NUMBER: _ClassVar[int]
    READONLY_FIELD_NUMBER: _ClassVar[int]
    size: int
    model: str
    device_name: str
    name: str
    serial: str
    modalias: str
    uuid: str
    wwid: str
    type: Disk.DiskType
    bus_path: str
    system_disk: bool
    subsystem: str
    readonly: bool
    def __init__(self, size: _Optional[int] = ..., model: _Optional[str] = ..., device_name: _Optional[str] = ..., name: _Optional[str] = ..., serial: _Optional[str] = ..., modalias: _Optional[str] = ..., uuid: _Optional[str] = ..., wwid: _Optional[str] = ..., type: _Optional[_Union[Disk.DiskType, str]] = ..., bus_path: _Optional[str] = ..., system_disk: _Optional[bool] = ..., subsystem: _Optional[str] = ..., readonly: _Optional[bool] = ...) -> None: ...

class Disks(_message.Message):
    __slots__ = ("metadata", "disks")
    METADATA_FIELD_NUMBER: _ClassVar[int]
    DISKS_FIELD_NUMBER: _ClassVar[int]
    metadata: _common_pb2.Metadata
    disks: _containers.RepeatedCompositeFieldContainer[Disk]
    def __init__(self, metadata: _Optional[_Union[_common_pb2.Metadata, _Mapping]] = ..., disks: _Optional[_Iterable[_Union[Disk, _Mapping]]] = ...) -> None: ...

class DisksResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Disks]
    def __init__(self, messages: _Optional[_Iterable[_Union[Disks, _Mapping]]] = ...) -> None: ...
