from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class DiskSpec(_message.Message):
    __slots__ = ("size", "io_size", "sector_size", "readonly", "model", "serial", "modalias", "wwid", "bus_path", "sub_system", "transport", "rotational", "cdrom", "dev_path", "pretty_size", "secondary_disks", "uuid", "symlinks", "firmware_version")
    SIZE_FIELD_NUMBER: _ClassVar[int]
    IO_SIZE_FIELD_NUMBER: _ClassVar[int]
    SECTOR_SIZE_FIELD_NUMBER: _ClassVar[int]
    READONLY_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SERIAL_FIELD_NUMBER: _ClassVar[int]
    MODALIAS_FIELD_NUMBER: _ClassVar[int]
    WWID_FIELD_NUMBER: _ClassVar[int]
    BUS_PATH_FIELD_NUMBER: _ClassVar[int]
    SUB_SYSTEM_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    ROTATIONAL_FIELD_NUMBER: _ClassVar[int]
    CDROM_FIELD_NUMBER: _ClassVar[int]
    DEV_PATH_FIELD_NUMBER: _ClassVar[int]
    PRETTY_SIZE_FIELD_NUMBER: _ClassVar[int]
    SECONDARY_DISKS_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    SYMLINKS_FIELD_NUMBER: _ClassVar[int]
    FIRMWARE_VERSION_FIELD_NUMBER: _ClassVar[int]
    size: int
    io_size: int
    sector_size: int
    readonly: bool
    model: str
    serial: str
    modalias: str
    wwid: str
    bus_path: str
    sub_system: str
    transport: str
    rotational: bool
    cdrom: bool
    dev_path: str
    pretty_size: str
    secondary_disks: _containers.RepeatedScalarFieldContainer[str]
    uuid: str
    symlinks: _containers.RepeatedScalarFieldContainer[str]
    firmware_version: str
    def __init__(self, size: _Optional[int] = ..., io_size: _Optional[int] = ..., sector_size: _Optional[int] = ..., readonly: _Optional[bool] = ..., model: _Optional[str] = ..., serial: _Optional[str] = ..., modalias: _Optional[str] = ..., wwid: _Optional[str] = ..., bus_path: _Optional[str] = ..., sub_system: _Optional[str] = ..., transport: _Optional[str] = ..., rotational: _Optional[bool] = ..., cdrom: _Optional[bool] = ..., dev_path: _Optional[str] = ..., pretty_size: _Optional[str] = ..., secondary_disks: _Optional[_Iterable[str]] = ..., uuid: _Optional[str] = ..., symlinks: _Optional[_Iterable[str]] = ..., firmware_version: _Optional[str] = ...) -> None: ...
