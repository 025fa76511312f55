from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor

class RuntimeMachineStage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MACHINE_STAGE_UNKNOWN: _ClassVar[RuntimeMachineStage]
    MACHINE_STAGE_BOOTING: _ClassVar[RuntimeMachineStage]
    MACHINE_STAGE_INSTALLING: _ClassVar[RuntimeMachineStage]
    MACHINE_STAGE_MAINTENANCE: _ClassVar[RuntimeMachineStage]
    MACHINE_STAGE_RUNNING: _ClassVar[RuntimeMachineStage]
    MACHINE_STAGE_REBOOTING: _ClassVar[RuntimeMachineStage]
    MACHINE_STAGE_SHUTTING_DOWN: _ClassVar[RuntimeMachineStage]
    MACHINE_STAGE_RESETTING: _ClassVar[RuntimeMachineStage]
    MACHINE_STAGE_UPGRADING: _ClassVar[RuntimeMachineStage]

class NethelpersAddressSortAlgorithm(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ADDRESS_SORT_ALGORITHM_V1: _ClassVar[NethelpersAddressSortAlgorithm]
    ADDRESS_SORT_ALGORITHM_V2: _ClassVar[NethelpersAddressSortAlgorithm]

class MachineType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TYPE_UNKNOWN: _ClassVar[MachineType]
    TYPE_INIT: _ClassVar[MachineType]
    TYPE_CONTROL_PLANE: _ClassVar[MachineType]
    TYPE_WORKER: _ClassVar[MachineType]

class NethelpersFamily(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NETHELPERS_FAMILY_UNSPECIFIED: _ClassVar[NethelpersFamily]
    FAMILY_INET4: _ClassVar[NethelpersFamily]
    FAMILY_INET6: _ClassVar[NethelpersFamily]

class NethelpersRoutingTable(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TABLE_UNSPEC: _ClassVar[NethelpersRoutingTable]
    TABLE_DEFAULT: _ClassVar[NethelpersRoutingTable]
    TABLE_MAIN: _ClassVar[NethelpersRoutingTable]
    TABLE_LOCAL: _ClassVar[NethelpersRoutingTable]

class NethelpersScope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCOPE_GLOBAL: _ClassVar[NethelpersScope]
    SCOPE_SITE: _ClassVar[NethelpersScope]
    SCOPE_LINK: _ClassVar[NethelpersScope]
    SCOPE_HOST: _ClassVar[NethelpersScope]
    SCOPE_NOWHERE: _ClassVar[NethelpersScope]

class NethelpersRouteType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TYPE_UNSPEC: _ClassVar[NethelpersRouteType]
    TYPE_UNICAST: _ClassVar[NethelpersRouteType]
    TYPE_LOCAL: _ClassVar[NethelpersRouteType]
    TYPE_BROADCAST: _ClassVar[NethelpersRouteType]
    TYPE_ANYCAST: _ClassVar[NethelpersRouteType]
    TYPE_MULTICAST: _ClassVar[NethelpersRouteType]
    TYPE_BLACKHOLE: _ClassVar[NethelpersRouteType]
    TYPE_UNREACHABLE: _ClassVar[NethelpersRouteType]
    TYPE_PROHIBIT: _ClassVar[NethelpersRouteType]
    TYPE_THROW: _ClassVar[NethelpersRouteType]
    TYPE_NAT: _ClassVar[NethelpersRouteType]
    TYPE_X_RESOLVE: _ClassVar[NethelpersRouteType]

class NethelpersRouteProtocol(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROTOCOL_UNSPEC: _ClassVar[NethelpersRouteProtocol]
    PROTOCOL_REDIRECT: _ClassVar[NethelpersRouteProtocol]
    PROTOCOL_KERNEL: _ClassVar[NethelpersRouteProtocol]
    PROTOCOL_BOOT: _ClassVar[NethelpersRouteProtocol]
    PROTOCOL_STATIC: _ClassVar[NethelpersRouteProtocol]
    PROTOCOL_DHCP: _ClassVar[NethelpersRouteProtocol]

class NethelpersLinkType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LINK_NETROM: _ClassVar[NethelpersLinkType]
    LINK_ETHER: _ClassVar[NethelpersLinkType]
    LINK_LOOPBCK: _ClassVar[NethelpersLinkType]

class NethelpersOperationalState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OPER_STATE_UNKNOWN: _ClassVar[NethelpersOperationalState]
    OPER_STATE_NOT_PRESENT: _ClassVar[NethelpersOperationalState]
    OPER_STATE_DOWN: _ClassVar[NethelpersOperationalState]
    OPER_STATE_LOWER_LAYER_DOWN: _ClassVar[NethelpersOperationalState]
    OPER_STATE_TESTING: _ClassVar[NethelpersOperationalState]
    OPER_STATE_DORMANT: _ClassVar[NethelpersOperationalState]
    OPER_STATE_UP: _ClassVar[NethelpersOperationalState]

class NethelpersPort(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TWISTED_PAIR: _ClassVar[NethelpersPort]
    AUI: _ClassVar[NethelpersPort]
    MII: _ClassVar[NethelpersPort]
    FIBRE: _ClassVar[NethelpersPort]
    BNC: _ClassVar[NethelpersPort]
    DIRECT_ATTACH: _ClassVar[NethelpersPort]
    NONE: _ClassVar[NethelpersPort]
    OTHER: _ClassVar[NethelpersPort]

class NethelpersDuplex(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HALF: _ClassVar[NethelpersDuplex]
    FULL: _ClassVar[NethelpersDuplex]
    UNKNOWN: _ClassVar[NethelpersDuplex]
MACHINE_STAGE_UNKNOWN: RuntimeMachineStage
MACHINE_STAGE_BOOTING: RuntimeMachineStage
MACHINE_STAGE_INSTALLING: RuntimeMachineStage
MACHINE_STAGE_MAINTENANCE: RuntimeMachineStage
MACHINE_STAGE_RUNNING: RuntimeMachineStage
MACHINE_STAGE_REBOOTING: RuntimeMachineStage
MACHINE_STAGE_SHUTTING_DOWN: RuntimeMachineStage
MACHINE_STAGE_RESETTING: RuntimeMachineStage
MACHINE_STAGE_UPGRADING: RuntimeMachineStage
ADDRESS_SORT_ALGORITHM_V1: NethelpersAddressSortAlgorithm
ADDRESS_SORT_ALGORITHM_V2: NethelpersAddressSortAlgorithm
TYPE_UNKNOWN: MachineType
TYPE_INIT: MachineType
TYPE_CONTROL_PLANE: MachineType
TYPE_WORKER: MachineType
NETHELPERS_FAMILY_UNSPECIFIED: NethelpersFamily
FAMILY_INET4: NethelpersFamily
FAMILY_INET6: NethelpersFamily
TABLE_UNSPEC: NethelpersRoutingTable
TABLE_DEFAULT: NethelpersRoutingTable
TABLE_MAIN: NethelpersRoutingTable
TABLE_LOCAL: NethelpersRoutingTable
SCOPE_GLOBAL: NethelpersScope
SCOPE_SITE: NethelpersScope
SCOPE_LINK: NethelpersScope
SCOPE_HOST: NethelpersScope
SCOPE_NOWHERE: NethelpersScope
TYPE_UNSPEC: NethelpersRouteType
TYPE_UNICAST: NethelpersRouteType
TYPE_LOCAL: NethelpersRouteType
TYPE_BROADCAST: NethelpersRouteType
TYPE_ANYCAST: NethelpersRouteType
TYPE_MULTICAST: NethelpersRouteType
TYPE_BLACKHOLE: NethelpersRouteType
TYPE_UNREACHABLE: NethelpersRouteType
TYPE_PROHIBIT: NethelpersRouteType
TYPE_THROW: NethelpersRouteType
TYPE_NAT: NethelpersRouteType
TYPE_X_RESOLVE: NethelpersRouteType
PROTOCOL_UNSPEC: NethelpersRouteProtocol
PROTOCOL_REDIRECT: NethelpersRouteProtocol
PROTOCOL_KERNEL: NethelpersRouteProtocol
PROTOCOL_BOOT: NethelpersRouteProtocol
PROTOCOL_STATIC: NethelpersRouteProtocol
PROTOCOL_DHCP: NethelpersRouteProtocol
LINK_NETROM: NethelpersLinkType
LINK_ETHER: NethelpersLinkType
LINK_LOOPBCK: NethelpersLinkType
OPER_STATE_UNKNOWN: NethelpersOperationalState
OPER_STATE_NOT_PRESENT: NethelpersOperationalState
OPER_STATE_DOWN: NethelpersOperationalState
OPER_STATE_LOWER_LAYER_DOWN: NethelpersOperationalState
OPER_STATE_TESTING: NethelpersOperationalState
OPER_STATE_DORMANT: NethelpersOperationalState
OPER_STATE_UP: NethelpersOperationalState
TWISTED_PAIR: NethelpersPort
AUI: NethelpersPort
MII: NethelpersPort
FIBRE: NethelpersPort
BNC: NethelpersPort
DIRECT_ATTACH: NethelpersPort
NONE: NethelpersPort
OTHER: NethelpersPort
HALF: NethelpersDuplex
FULL: NethelpersDuplex
UNKNOWN: NethelpersDuplex
