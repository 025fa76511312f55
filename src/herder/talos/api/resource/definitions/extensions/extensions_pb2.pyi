from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Compatibility(_message.Message):
    __slots__ = ("talos",)
    TALOS_FIELD_NUMBER: _ClassVar[int]
    talos: Constraint
    def __init__(self, talos: _Optional[_Union[Constraint, _Mapping]] = ...) -> None: ...

class Constraint(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: str
    def __init__(self, version: _Optional[str] = ...) -> None: ...

class Layer(_message.Message):
    __slots__ = ("image", "metadata")
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    image: str
    metadata: Metadata
    def __init__(self, image: _Optional[str] = ..., metadata: _Optional[_Union[Metadata, _Mapping]] = ...) -> None: ...

class Metadata(_message.Message):
    __slots__ = ("name", "version", "author", "description", "compatibility")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    COMPATIBILITY_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    author: str
    description: str
    compatibility: Compatibility
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., author: _Optional[str] = ..., description: _Optional[str] = ..., compatibility: _Optional[_Union[Compatibility, _Mapping]] = ...) -> None: ...
