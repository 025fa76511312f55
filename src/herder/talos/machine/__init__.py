"""herder's client of the Talos machine API (gRPC ``machine.MachineService``) and of its resource API
(``cosi.resource.State``, typed in ``resources``), and what it shares with servers.

``MachineClient.from_talosconfig(config, endpoint=..., node=...)`` or ``MachineClient.insecure(endpoint)``.
"""

from herder.talos.machine.client import Credentials, MachineClient, decode_event, split_endpoint
from herder.talos.machine.errors import (
    AlreadyExists,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    MachineAPIError,
    NotFound,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)
from herder.talos.machine.types import (
    ApplyMode,
    ApplyResult,
    EtcdMember,
    EtcdMemberStatus,
    MachineEvent,
    MachineStage,
    MachineStatus,
    RebootMode,
    SequenceEvent,
    ServiceStatus,
    UpgradeResult,
    VersionInfo,
    WipeMode,
)

__all__ = [
    "AlreadyExists",
    "ApplyMode",
    "ApplyResult",
    "Credentials",
    "DeadlineExceeded",
    "EtcdMember",
    "EtcdMemberStatus",
    "FailedPrecondition",
    "InvalidArgument",
    "MachineAPIError",
    "MachineClient",
    "MachineEvent",
    "MachineStage",
    "MachineStatus",
    "NotFound",
    "PermissionDenied",
    "RebootMode",
    "SequenceEvent",
    "ServiceStatus",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "UpgradeResult",
    "VersionInfo",
    "WipeMode",
    "decode_event",
    "split_endpoint",
]
