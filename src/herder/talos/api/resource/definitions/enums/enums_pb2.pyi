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
