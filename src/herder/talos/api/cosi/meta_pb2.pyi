from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NamespaceSpec(_message.Message):
    __slots__ = ("description",)
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    description: str
    def __init__(self, description: _Optional[str] = ...) -> None: ...

class ResourceDefinitionSpec(_message.Message):
    __slots__ = ("resource_type", "display_type", "default_namespace", "aliases", "all_aliases", "print_columns", "sensitivity")
    class Sensitivity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        NON_SENSITIVE: _ClassVar[ResourceDefinitionSpec.Sensitivity]
        SENSITIVE: _ClassVar[ResourceDefinitionSpec.Sensitivity]
    NON_SENSITIVE: ResourceDefinitionSpec.Sensitivity
    SENSITIVE: ResourceDefinitionSpec.Sensitivity
    class PrintColumn(_message.Message):
        __slots__ = ("name", "json_path")
        NAME_FIELD_NUMBER: _ClassVar[int]
        JSON_PATH_FIELD_NUMBER: _ClassVar[int]
        name: str
        json_path: str
        def __init__(self, name: _Optional[str] = ..., json_path: _Optional[str] = ...) -> None: ...
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_TYPE_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    ALL_ALIASES_FIELD_NUMBER: _ClassVar[int]
    PRINT_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    SENSITIVITY_FIELD_NUMBER: _ClassVar[int]
    resource_type: str
    display_type: str
    default_namespace: str
    aliases: _containers.RepeatedScalarFieldContainer[str]
    all_aliases: _containers.RepeatedScalarFieldContainer[str]
    print_columns: _containers.RepeatedCompositeFieldContainer[ResourceDefinitionSpec.PrintColumn]
    sensitivity: ResourceDefinitionSpec.Sensitivity
    def __init__(self, resource_type: _Optional[str] = ..., display_type: _Optional[str] = ..., default_namespace: _Optional[str] = ..., aliases: _Optional[_Iterable[str]] = ..., all_aliases: _Optional[_Iterable[str]] = ..., print_columns: _Optional[_Iterable[_Union[ResourceDefinitionSpec.PrintColumn, _Mapping]]] = ..., sensitivity: _Optional[_Union[ResourceDefinitionSpec.Sensitivity, str]] = ...) -> None: ...
