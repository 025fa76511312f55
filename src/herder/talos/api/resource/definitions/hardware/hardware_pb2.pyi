from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class MemoryModuleSpec(_message.Message):
    __slots__ = ("size", "device_locator", "bank_locator", "speed", "manufacturer", "serial_number", "asset_tag", "product_name")
    SIZE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_LOCATOR_FIELD_NUMBER: _ClassVar[int]
    BANK_LOCATOR_FIELD_NUMBER: _ClassVar[int]
    SPEED_FIELD_NUMBER: _ClassVar[int]
    MANUFACTURER_FIELD_NUMBER: _ClassVar[int]
    SERIAL_NUMBER_FIELD_NUMBER: _ClassVar[int]
    ASSET_TAG_FIELD_NUMBER: _ClassVar[int]
    PRODUCT_NAME_FIELD_NUMBER: _ClassVar[int]
    size: int
    device_locator: str
    bank_locator: str
    speed: int
    manufacturer: str
    serial_number: str
    asset_tag: str
    product_name: str
    def __init__(self, size: _Optional[int] = ..., device_locator: _Optional[str] = ..., bank_locator: _Optional[str] = ..., speed: _Optional[int] = ..., manufacturer: _Optional[str] = ..., serial_number: _Optional[str] = ..., asset_tag: _Optional[str] = ..., product_name: _Optional[str] = ...) -> None: ...

class ProcessorSpec(_message.Message):
    __slots__ = ("socket", "manufacturer", "product_name", "max_speed", "boot_speed", "status", "serial_number", "asset_tag", "part_number", "core_count", "core_enabled", "thread_count")
    SOCKET_FIELD_NUMBER: _ClassVar[int]
    MANUFACTURER_FIELD_NUMBER: _ClassVar[int]
    PRODUCT_NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_SPEED_FIELD_NUMBER: _ClassVar[int]
    BOOT_SPEED_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SERIAL_NUMBER_FIELD_NUMBER: _ClassVar[int]
    ASSET_TAG_FIELD_NUMBER: _ClassVar[int]
    PART_NUMBER_FIELD_NUMBER: _ClassVar[int]
    CORE_COUNT_FIELD_NUMBER: _ClassVar[int]
    CORE_ENABLED_FIELD_NUMBER: _ClassVar[int]
    THREAD_COUNT_FIELD_NUMBER: _ClassVar[int]
    socket: str
    manufacturer: str
    product_name: str
    max_speed: int
    boot_speed: int
    status: int
    serial_number: str
    asset_tag: str
    part_number: str
    core_count: int
    core_enabled: int
    thread_count: int
    def __init__(self, socket: _Optional[str] = ..., manufacturer: _Optional[str] = ..., product_name: _Optional[str] = ..., max_speed: _Optional[int] = ..., boot_speed: _Optional[int] = ..., status: _Optional[int] = ..., serial_number: _Optional[str] = ..., asset_tag: _Optional[str] = ..., part_number: _Optional[str] = ..., core_count: _Optional[int] = ..., core_enabled: _Optional[int] = ..., thread_count: _Optional[int] = ...) -> None: ...

class SystemInformationSpec(_message.Message):
    __slots__ = ("manufacturer", "product_name", "version", "serial_number", "uuid", "wake_up_type", "sku_number", "bios_version")
    MANUFACTURER_FIELD_NUMBER: _ClassVar[int]
    PRODUCT_NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SERIAL_NUMBER_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    WAKE_UP_TYPE_FIELD_NUMBER: _ClassVar[int]
    SKU_NUMBER_FIELD_NUMBER: _ClassVar[int]
    BIOS_VERSION_FIELD_NUMBER: _ClassVar[int]
    manufacturer: str
    product_name: str
    version: str
    serial_number: str
    uuid: str
    wake_up_type: str
    sku_number: str
    bios_version: str
    def __init__(self, manufacturer: _Optional[str] = ..., product_name: _Optional[str] = ..., version: _Optional[str] = ..., serial_number: _Optional[str] = ..., uuid: _Optional[str] = ..., wake_up_type: _Optional[str] = ..., sku_number: _Optional[str] = ..., bios_version: _Optional[str] = ...) -> None: ...
