from herder.talos.api.common import common_pb2 as _common_pb2
from herder.talos.api.resource.definitions.enums import enums_pb2 as _enums_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NodeAddressSpec(_message.Message):
    __slots__ = ("addresses", "sort_algorithm")
    ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    SORT_ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    addresses: _containers.RepeatedCompositeFieldContainer[_common_pb2.NetIPPrefix]
    sort_algorithm: _enums_pb2.NethelpersAddressSortAlgorithm
    def __init__(self, addresses: _Optional[_Iterable[_Union[_common_pb2.NetIPPrefix, _Mapping]]] = ..., sort_algorithm: _Optional[_Union[_enums_pb2.NethelpersAddressSortAlgorithm, str]] = ...) -> None: ...

class HostnameStatusSpec(_message.Message):
    __slots__ = ("hostname", "domainname")
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    DOMAINNAME_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    domainname: str
    def __init__(self, hostname: _Optional[str] = ..., domainname: _Optional[str] = ...) -> None: ...
