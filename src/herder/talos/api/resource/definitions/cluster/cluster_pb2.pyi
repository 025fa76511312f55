from herder.talos.api.common import common_pb2 as _common_pb2
from herder.talos.api.resource.definitions.enums import enums_pb2 as _enums_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ControlPlane(_message.Message):
    __slots__ = ("api_server_port",)
    API_SERVER_PORT_FIELD_NUMBER: _ClassVar[int]
    api_server_port: int
    def __init__(self, api_server_port: _Optional[int] = ...) -> None: ...

class MemberSpec(_message.Message):
    __slots__ = ("node_id", "addresses", "hostname", "machine_type", "operating_system", "control_plane")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    MACHINE_TYPE_FIELD_NUMBER: _ClassVar[int]
    OPERATING_SYSTEM_FIELD_NUMBER: _ClassVar[int]
    CONTROL_PLANE_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    addresses: _containers.RepeatedCompositeFieldContainer[_common_pb2.NetIP]
    hostname: str
    machine_type: _enums_pb2.MachineType
    operating_system: str
    control_plane: ControlPlane
    def __init__(self, node_id: _Optional[str] = ..., addresses: _Optional[_Iterable[_Union[_common_pb2.NetIP, _Mapping]]] = ..., hostname: _Optional[str] = ..., machine_type: _Optional[_Union[_enums_pb2.MachineType, str]] = ..., operating_system: _Optional[str] = ..., control_plane: _Optional[_Union[ControlPlane, _Mapping]] = ...) -> None: ...

class InfoSpec(_message.Message):
    __slots__ = ("cluster_id", "cluster_name")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    cluster_name: str
    def __init__(self, cluster_id: _Optional[str] = ..., cluster_name: _Optional[str] = ...) -> None: ...
