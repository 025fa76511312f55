from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class ProvisionRequest(_message.Message):
    __slots__ = ("node_uuid", "node_public_key", "join_token", "node_unique_token", "talos_version", "wireguard_over_grpc")
    NODE_UUID_FIELD_NUMBER: _ClassVar[int]
    NODE_PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    JOIN_TOKEN_FIELD_NUMBER: _ClassVar[int]
    NODE_UNIQUE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TALOS_VERSION_FIELD_NUMBER: _ClassVar[int]
    WIREGUARD_OVER_GRPC_FIELD_NUMBER: _ClassVar[int]
    node_uuid: str
    node_public_key: str
    join_token: str
    node_unique_token: str
    talos_version: str
    wireguard_over_grpc: bool
    def __init__(self, node_uuid: _Optional[str] = ..., node_public_key: _Optional[str] = ..., join_token: _Optional[str] = ..., node_unique_token: _Optional[str] = ..., talos_version: _Optional[str] = ..., wireguard_over_grpc: _Optional[bool] = ...) -> None: ...

class ProvisionResponse(_message.Message):
    __slots__ = ("server_endpoint", "server_public_key", "node_address_prefix", "server_address", "grpc_peer_addr_port")
    SERVER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    SERVER_PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    NODE_ADDRESS_PREFIX_FIELD_NUMBER: _ClassVar[int]
    SERVER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GRPC_PEER_ADDR_PORT_FIELD_NUMBER: _ClassVar[int]
    server_endpoint: _containers.RepeatedScalarFieldContainer[str]
    server_public_key: str
    node_address_prefix: str
    server_address: str
    grpc_peer_addr_port: str
    def __init__(self, server_endpoint: _Optional[_Iterable[str]] = ..., server_public_key: _Optional[str] = ..., node_address_prefix: _Optional[str] = ..., server_address: _Optional[str] = ..., grpc_peer_addr_port: _Optional[str] = ...) -> None: ...
