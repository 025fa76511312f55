"""ControlPlaneStatus: the health of one cluster's control plane as herder last measured it — etcd (its
members, their health, the leader, quorum, database sizes), each control plane's API server, controller
manager and scheduler, and the load balancer in front of them — with conditions and reasons. One per
Cluster, of the same name, written by herder only."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from herder.resources.configuration import GROUP, VERSION
from herder.resources.registry import KindInfo, PrinterColumn
from herder.resources.status import WithConditions, condition_column, condition_reason_column

_STRICT = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)


class EtcdMemberHealth(BaseModel):
    model_config = _STRICT

    machine: str = Field(default="", description="the UUID of the member's machine ('' for a stray member)")
    id: str = Field(description="the member id, hexadecimal as etcdctl shows it")
    healthy: bool = False
    leader: bool = False
    db_size: int = Field(default=0, alias="dbSize")
    raft_index: int = Field(default=0, alias="raftIndex")
    errors: list[str] = []


class EtcdHealth(BaseModel):
    model_config = _STRICT

    members: list[EtcdMemberHealth] = []
    leader: str = Field(default="", description="the machine of the leader")
    quorum: bool = False
    leader_changes: int = Field(default=0, alias="leaderChanges", description="elections herder has seen")


class ComponentHealth(BaseModel):
    """The control plane components of one machine, from their static pods."""

    model_config = _STRICT

    machine: str
    address: str = ""
    api_server: bool = Field(default=False, alias="apiServer")
    controller_manager: bool = Field(default=False, alias="controllerManager")
    scheduler: bool = False


class LoadBalancerHealth(BaseModel):
    model_config = _STRICT

    endpoint: str = ""
    backends: int = 0
    healthy: int = 0


class ControlPlaneStatusStatus(WithConditions):
    model_config = _STRICT

    etcd: EtcdHealth = Field(default_factory=EtcdHealth)
    components: list[ComponentHealth] = []
    load_balancer: LoadBalancerHealth | None = Field(default=None, alias="loadBalancer")
    checked_at: str = Field(
        default="",
        alias="checkedAt",
        description="when a probe last found something new: the status has held since (probes that find "
        "nothing new write nothing)",
    )
    conditions: list[dict[str, Any]] = []


def _members(obj: dict[str, Any]) -> str:
    etcd = (obj.get("status") or {}).get("etcd") or {}
    members = etcd.get("members") or []
    return f"{sum(1 for m in members if m.get('healthy'))}/{len(members)}"


CONTROL_PLANE_STATUS = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="ControlPlaneStatus",
    plural="controlplanestatuses",
    status_model=ControlPlaneStatusStatus,
    short_names=("cps",),
    categories=("herder",),
    printer_columns=(
        condition_column("Ready"),
        PrinterColumn("Etcd", ".status.etcd.members", compute=_members),
        PrinterColumn("Quorum", ".status.etcd.quorum"),
        condition_column("APIServersReady", "API-Servers"),
        PrinterColumn("Changed", ".status.checkedAt", type="date"),
        condition_reason_column("Ready", "Message"),
    ),
    description="The health of one cluster's control plane: etcd, API servers, controller managers, "
    "schedulers and the load balancer; written by herder.",
)
