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

class StatusSpec(_message.Message):
    __slots__ = ("address_ready", "connectivity_ready", "hostname_ready", "etc_files_ready")
    ADDRESS_READY_FIELD_NUMBER: _ClassVar[int]
    CONNECTIVITY_READY_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_READY_FIELD_NUMBER: _ClassVar[int]
    ETC_FILES_READY_FIELD_NUMBER: _ClassVar[int]
    address_ready: bool
    connectivity_ready: bool
    hostname_ready: bool
    etc_files_ready: bool
    def __init__(self, address_ready: _Optional[bool] = ..., connectivity_ready: _Optional[bool] = ..., hostname_ready: _Optional[bool] = ..., etc_files_ready: _Optional[bool] = ...) -> None: ...

class ResolverStatusSpec(_message.Message):
    __slots__ = ("dns_servers", "search_domains")
    DNS_SERVERS_FIELD_NUMBER: _ClassVar[int]
    SEARCH_DOMAINS_FIELD_NUMBER: _ClassVar[int]
    dns_servers: _containers.RepeatedCompositeFieldContainer[_common_pb2.NetIP]
    search_domains: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, dns_servers: _Optional[_Iterable[_Union[_common_pb2.NetIP, _Mapping]]] = ..., search_domains: _Optional[_Iterable[str]] = ...) -> None: ...

class TimeServerStatusSpec(_message.Message):
    __slots__ = ("ntp_servers", "use_nts")
    NTP_SERVERS_FIELD_NUMBER: _ClassVar[int]
    USE_NTS_FIELD_NUMBER: _ClassVar[int]
    ntp_servers: _containers.RepeatedScalarFieldContainer[str]
    use_nts: bool
    def __init__(self, ntp_servers: _Optional[_Iterable[str]] = ..., use_nts: _Optional[bool] = ...) -> None: ...

class RouteStatusSpec(_message.Message):
    __slots__ = ("family", "destination", "source", "gateway", "out_link_index", "out_link_name", "table", "priority", "scope", "type", "flags", "protocol", "mtu")
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    GATEWAY_FIELD_NUMBER: _ClassVar[int]
    OUT_LINK_INDEX_FIELD_NUMBER: _ClassVar[int]
    OUT_LINK_NAME_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    MTU_FIELD_NUMBER: _ClassVar[int]
    family: _enums_pb2.NethelpersFamily
    destination: _common_pb2.NetIPPrefix
    source: _common_pb2.NetIP
    gateway: _common_pb2.NetIP
    out_link_index: int
    out_link_name: str
    table: _enums_pb2.NethelpersRoutingTable
    priority: int
    scope: _enums_pb2.NethelpersScope
    type: _enums_pb2.NethelpersRouteType
    flags: int
    protocol: _enums_pb2.NethelpersRouteProtocol
    mtu: int
    def __init__(self, family: _Optional[_Union[_enums_pb2.NethelpersFamily, str]] = ..., destination: _Optional[_Union[_common_pb2.NetIPPrefix, _Mapping]] = ..., source: _Optional[_Union[_common_pb2.NetIP, _Mapping]] = ..., gateway: _Optional[_Union[_common_pb2.NetIP, _Mapping]] = ..., out_link_index: _Optional[int] = ..., out_link_name: _Optional[str] = ..., table: _Optional[_Union[_enums_pb2.NethelpersRoutingTable, str]] = ..., priority: _Optional[int] = ..., scope: _Optional[_Union[_enums_pb2.NethelpersScope, str]] = ..., type: _Optional[_Union[_enums_pb2.NethelpersRouteType, str]] = ..., flags: _Optional[int] = ..., protocol: _Optional[_Union[_enums_pb2.NethelpersRouteProtocol, str]] = ..., mtu: _Optional[int] = ...) -> None: ...

class LinkStatusSpec(_message.Message):
    __slots__ = ("index", "type", "link_index", "flags", "hardware_addr", "broadcast_addr", "mtu", "queue_disc", "master_index", "operational_state", "kind", "slave_kind", "bus_path", "pciid", "driver", "driver_version", "firmware_version", "product_id", "vendor_id", "product", "vendor", "link_state", "speed_megabits", "port", "duplex", "permanent_addr")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    LINK_INDEX_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_ADDR_FIELD_NUMBER: _ClassVar[int]
    BROADCAST_ADDR_FIELD_NUMBER: _ClassVar[int]
    MTU_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DISC_FIELD_NUMBER: _ClassVar[int]
    MASTER_INDEX_FIELD_NUMBER: _ClassVar[int]
    OPERATIONAL_STATE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SLAVE_KIND_FIELD_NUMBER: _ClassVar[int]
    BUS_PATH_FIELD_NUMBER: _ClassVar[int]
    PCIID_FIELD_NUMBER: _ClassVar[int]
    DRIVER_FIELD_NUMBER: _ClassVar[int]
    DRIVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    FIRMWARE_VERSION_FIELD_NUMBER: _ClassVar[int]
    PRODUCT_ID_FIELD_NUMBER: _ClassVar[int]
    VENDOR_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCT_FIELD_NUMBER: _ClassVar[int]
    VENDOR_FIELD_NUMBER: _ClassVar[int]
    LINK_STATE_FIELD_NUMBER: _ClassVar[int]
    SPEED_MEGABITS_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    DUPLEX_FIELD_NUMBER: _ClassVar[int]
    PERMANENT_ADDR_FIELD_NUMBER: _ClassVar[int]
    index: int
    type: _enums_pb2.NethelpersLinkType
    link_index: int
    flags: int
    hardware_addr: bytes
    broadcast_addr: bytes
    mtu: int
    queue_disc: str
    master_index: int
    operational_state: _enums_pb2.NethelpersOperationalState
    kind: str
    slave_kind: str
    bus_path: str
    pciid: str
    driver: str
    driver_version: str
    firmware_version: str
    product_id: str
    vendor_id: str
    product: str
    vendor: str
    link_state: bool
    speed_megabits: int
    port: _enums_pb2.NethelpersPort
    duplex: _enums_pb2.NethelpersDuplex
    permanent_addr: bytes
    def __init__(self, index: _Optional[int] = ..., type: _Optional[_Union[_enums_pb2.NethelpersLinkType, str]] = ..., link_index: _Optional[int] = ..., flags: _Optional[int] = ..., hardware_addr: _Optional[bytes] = ..., broadcast_addr: _Optional[bytes] = ..., mtu: _Optional[int] = ..., queue_disc: _Optional[str] = ..., master_index: _Optional[int] = ..., operational_state: _Optional[_Union[_enums_pb2.NethelpersOperationalState, str]] = ..., kind: _Optional[str] = ..., slave_kind: _Optional[str] = ..., bus_path: _Optional[str] = ..., pciid: _Optional[str] = ..., driver: _Optional[str] = ..., driver_version: _Optional[str] = ..., firmware_version: _Optional[str] = ..., product_id: _Optional[str] = ..., vendor_id: _Optional[str] = ..., product: _Optional[str] = ..., vendor: _Optional[str] = ..., link_state: _Optional[bool] = ..., speed_megabits: _Optional[int] = ..., port: _Optional[_Union[_enums_pb2.NethelpersPort, str]] = ..., duplex: _Optional[_Union[_enums_pb2.NethelpersDuplex, str]] = ..., permanent_addr: _Optional[bytes] = ...) -> None: ...
