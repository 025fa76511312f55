"""Typed results of the Talos machine API calls herder makes."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from herder.talos.api.machine import machine_pb2 as pb


class ApplyMode(enum.IntEnum):
    """How a config is applied (``ApplyConfigurationRequest.Mode``)."""

    REBOOT = pb.ApplyConfigurationRequest.REBOOT
    """Deprecated alias: apply, then reboot."""
    AUTO = pb.ApplyConfigurationRequest.AUTO
    NO_REBOOT = pb.ApplyConfigurationRequest.NO_REBOOT
    STAGED = pb.ApplyConfigurationRequest.STAGED
    TRY = pb.ApplyConfigurationRequest.TRY


class MachineStage(enum.IntEnum):
    UNKNOWN = pb.MachineStatusEvent.UNKNOWN
    BOOTING = pb.MachineStatusEvent.BOOTING
    INSTALLING = pb.MachineStatusEvent.INSTALLING
    MAINTENANCE = pb.MachineStatusEvent.MAINTENANCE
    RUNNING = pb.MachineStatusEvent.RUNNING
    REBOOTING = pb.MachineStatusEvent.REBOOTING
    SHUTTING_DOWN = pb.MachineStatusEvent.SHUTTING_DOWN
    RESETTING = pb.MachineStatusEvent.RESETTING
    UPGRADING = pb.MachineStatusEvent.UPGRADING


class RebootMode(enum.IntEnum):
    DEFAULT = pb.RebootRequest.DEFAULT
    POWERCYCLE = pb.RebootRequest.POWERCYCLE
    FORCE = pb.RebootRequest.FORCE


class WipeMode(enum.IntEnum):
    ALL = pb.ResetRequest.ALL
    SYSTEM_DISK = pb.ResetRequest.SYSTEM_DISK
    USER_DISKS = pb.ResetRequest.USER_DISKS


@dataclass(frozen=True)
class VersionInfo:
    tag: str
    sha: str
    built: str
    go_version: str
    os: str
    arch: str
    platform: str
    platform_mode: str
    rbac: bool
    node: str = ""


@dataclass(frozen=True)
class ApplyResult:
    mode: ApplyMode
    """The mode the machine actually used (AUTO resolves to NO_REBOOT or REBOOT)."""
    details: str
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class UpgradeResult:
    ack: str
    actor_id: str


@dataclass(frozen=True)
class ServiceStatus:
    id: str
    state: str
    healthy: bool
    health_unknown: bool
    last_message: str


@dataclass(frozen=True)
class EtcdMember:
    id: int
    hostname: str
    peer_urls: tuple[str, ...]
    client_urls: tuple[str, ...]
    is_learner: bool


@dataclass(frozen=True)
class EtcdMemberStatus:
    """What one etcd member says of itself (``EtcdStatus``): its id, the leader it follows, its database."""

    member_id: int
    leader: int
    db_size: int
    db_size_in_use: int
    raft_index: int
    raft_term: int
    is_learner: bool
    errors: tuple[str, ...] = ()


@dataclass(frozen=True)
class UnmetCondition:
    name: str
    reason: str


@dataclass(frozen=True)
class MachineStatus:
    """``MachineStatusEvent``: the machine's stage and readiness."""

    stage: MachineStage
    ready: bool
    unmet_conditions: tuple[UnmetCondition, ...] = ()


@dataclass(frozen=True)
class SequenceEvent:
    sequence: str
    action: str
    """``NOOP``, ``START`` or ``STOP``."""
    error: str = ""


@dataclass(frozen=True)
class PhaseEvent:
    phase: str
    action: str


@dataclass(frozen=True)
class TaskEvent:
    task: str
    action: str


@dataclass(frozen=True)
class ServiceStateEvent:
    service: str
    action: str
    message: str
    healthy: bool


@dataclass(frozen=True)
class ConfigValidationErrorEvent:
    error: str


Payload = (
    MachineStatus
    | SequenceEvent
    | PhaseEvent
    | TaskEvent
    | ServiceStateEvent
    | ConfigValidationErrorEvent
    | None
)


@dataclass(frozen=True)
class MachineEvent:
    id: str
    type_url: str
    payload: Payload
    """The decoded event, or ``None`` for a kind herder does not know."""
    actor_id: str = ""
    node: str = ""
