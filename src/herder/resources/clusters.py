"""Clusters on machines: Cluster, MachineSet, MachineSetNode, ClusterMachine and ClusterMachineConfig.

A Cluster says which Talos and Kubernetes versions to run. Its MachineSets (label ``herder.dev/cluster``)
say how many machines of each role it wants and where they come from; each allocated machine is bound by
a MachineSetNode named by the machine's UUID (so a machine can never be in two sets) and becomes a
ClusterMachine of the same name, whose generated Talos config is its ClusterMachineConfig (sensitive).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from herder.resources.backups import BackupsStatus, BootstrapSpec, ClusterBackups
from herder.resources.configuration import GROUP, VERSION
from herder.resources.machines import CLUSTER_LABEL, MACHINE_SET_LABEL, Stage
from herder.resources.manifests import HealthCheckResult
from herder.resources.object import Resource
from herder.resources.registry import KindInfo, PrinterColumn, label_path
from herder.resources.status import WithConditions, condition_column, condition_reason_column, status_of

_STRICT = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

Role = Literal["controlplane", "worker"]
CONTROL_PLANE_SET_SUFFIX = "-control-planes"
# When, and to whom, a cluster's own admin kubeconfig was last handed out (``--break-glass``).
BREAK_GLASS_ANNOTATION = "herder.dev/break-glass-issued"
# Marks the objects a cluster template made (``herder cluster template sync``); users may set it.
MANAGED_BY_ANNOTATION = "herder.dev/managed-by"
CLUSTER_TEMPLATES = "cluster-templates"
# A locked cluster: herder changes nothing on its machines (no config apply, upgrade, allocation change,
# teardown, reset) until the annotation goes; its status is still observed. Operator on the cluster sets it.
LOCKED_ANNOTATION = "herder.dev/locked"
IMPORTED_ANNOTATION = "herder.dev/imported"
"""On a Cluster taken over from running machines (``herder cluster import``): its secrets are the ones read
back out of their configs, and its machines keep the configs they run. On a Machine, the cluster whose import
registered it (``herder cluster import --abort`` removes it again)."""
IMPORT_ABORTED_ANNOTATION = "herder.dev/import-aborted"
"""On an imported Cluster being deleted by ``herder cluster import --abort``: its objects go, and its machines
are left as they run (not reset), locked or not."""

_VERSION = re.compile(r"^v?\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?$")


def control_plane_set_name(cluster: str) -> str:
    """The name of a cluster's one control plane MachineSet."""
    return cluster + CONTROL_PLANE_SET_SUFFIX


def is_locked(cluster: Resource) -> bool:
    """Whether a Cluster is locked: it carries ``herder.dev/locked`` with any value but ``false``."""
    value = cluster.metadata.annotations.get(LOCKED_ANNOTATION)
    return value is not None and value.strip().lower() != "false"


def is_imported(cluster: Resource) -> bool:
    return IMPORTED_ANNOTATION in cluster.metadata.annotations


def is_import_aborted(cluster: Resource) -> bool:
    return is_imported(cluster) and IMPORT_ABORTED_ANNOTATION in cluster.metadata.annotations


def is_importing(cluster: Resource) -> bool:
    """An imported cluster whose machines herder has not all taken over yet (no ``Imported`` condition)."""
    return is_imported(cluster) and not status_of(cluster, ClusterStatus).condition_true("Imported")


_EXAMPLES = {"Talos": "v1.13.2", "Kubernetes": "1.33.0"}


def _version(value: str, what: str) -> str:
    if not _VERSION.match(value.strip()):
        raise ValueError(f"invalid {what} version {value!r}: expected X.Y.Z, e.g. {_EXAMPLES[what]}")
    return value.strip()


class ClusterFeatures(BaseModel):
    model_config = _STRICT

    disk_encryption: bool = Field(default=False, alias="diskEncryption")
    kube_span: bool = Field(default=False, alias="kubeSpan")


class ManagedControlPlane(BaseModel):
    """A control plane the platform runs: ``size`` machines of a managed control plane offering."""

    model_config = _STRICT

    enabled: bool = False
    provider: str = Field(default="", description="the offering (ManagedControlPlaneOffering) to use")
    size: str = Field(default="", description="one of the offering's sizes, e.g. xs")

    @model_validator(mode="after")
    def _complete(self) -> ManagedControlPlane:
        if self.enabled and not self.provider:
            raise ValueError("provider: a managed control plane names its offering")
        if self.enabled and not self.size:
            raise ValueError("size: a managed control plane names one of its offering's sizes")
        return self


RotationComponent = Literal["TalosCA", "KubernetesCA"]


class SecretsRotationSpec(BaseModel):
    """Rotate one of the cluster's CAs; a new ``generation`` starts a new rotation."""

    model_config = _STRICT

    component: RotationComponent
    generation: int = Field(ge=1, description="raise it to rotate again")


class ClusterControlPlane(BaseModel):
    model_config = _STRICT

    managed: ManagedControlPlane | None = None


class ClusterSpec(BaseModel):
    model_config = _STRICT

    talos_version: str = Field(alias="talosVersion")
    kubernetes_version: str = Field(alias="kubernetesVersion")
    endpoint: str = Field(
        default="", description="the Kubernetes API URL the configs carry; empty: herder's load balancer"
    )
    features: ClusterFeatures = Field(default_factory=ClusterFeatures)
    backups: ClusterBackups | None = Field(default=None, description="scheduled etcd backups")
    system_extensions: list[str] = Field(
        default_factory=list, alias="systemExtensions", description="official extensions of every machine"
    )
    control_plane: ClusterControlPlane | None = Field(default=None, alias="controlPlane")
    secrets_rotation: SecretsRotationSpec | None = Field(
        default=None, alias="secretsRotation", description="rotate the Talos or Kubernetes CA"
    )

    @property
    def managed(self) -> ManagedControlPlane | None:
        """The managed control plane asked for, if any."""
        managed = self.control_plane.managed if self.control_plane is not None else None
        return managed if managed is not None and managed.enabled else None

    @field_validator("talos_version")
    @classmethod
    def _talos(cls, value: str) -> str:
        value = _version(value, "Talos")
        return value if value.startswith("v") else "v" + value

    @field_validator("kubernetes_version")
    @classmethod
    def _kubernetes(cls, value: str) -> str:
        return _version(value, "Kubernetes").removeprefix("v")

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        if value and not re.match(r"^https://[^/\s]+(:\d+)?/?$", value):
            raise ValueError(f"invalid endpoint {value!r}: expected https://HOST:PORT")
        return value.rstrip("/")


class MachineCounts(BaseModel):
    model_config = _STRICT

    total: int = 0
    ready: int = 0
    wanted: int | None = None


class BootstrapStatus(BaseModel):
    """The one etcd bootstrap of a cluster: recorded before it is sent, and never sent to another machine."""

    model_config = _STRICT

    machine: str
    requested_at: str = Field(alias="requestedAt")
    completed_at: str = Field(default="", alias="completedAt")


RotationPhase = Literal[
    "Pending",
    "Preparing",
    "AcceptingNewCA",
    "SwitchingIssuer",
    "ReissuingCredentials",
    "DroppingOldCA",
    "Done",
]
ROTATION_PHASES: tuple[RotationPhase, ...] = (
    "Preparing",
    "AcceptingNewCA",
    "SwitchingIssuer",
    "ReissuingCredentials",
    "DroppingOldCA",
    "Done",
)
"""The steps of a CA rotation in order (``Pending``: asked for, waiting to start)."""


class SecretsRotationStatus(BaseModel):
    """A CA rotation: the phase it is in (persisted before each step), and what it waits for or failed on."""

    model_config = _STRICT

    component: RotationComponent
    generation: int = 0
    phase: RotationPhase = "Pending"
    started_at: str = Field(default="", alias="startedAt")
    finished_at: str = Field(default="", alias="finishedAt")
    last_error: str = Field(default="", alias="lastError")


ClusterPhase = Literal["Provisioning", "ScalingUp", "ScalingDown", "Running", "Destroying"]


class Rollout(BaseModel):
    """One change rolling through a cluster's machines: what it is doing, how far it got, why it stopped."""

    model_config = _STRICT

    kind: Literal["Talos", "Kubernetes", "Config"]
    target: str = Field(default="", description="the version rolled out (empty for a config rollout)")
    done: int = 0
    total: int = 0
    state: Literal["Rolling", "Done", "Stopped", "Held"] = Field(
        default="Rolling", description="Held: waiting for a health check or the upgrade pre-checks"
    )
    message: str = ""


class ClusterStatus(WithConditions):
    model_config = _STRICT

    phase: ClusterPhase = "Provisioning"
    machines: MachineCounts = Field(default_factory=MachineCounts)
    endpoint: str = ""
    talos_contract: str = Field(default="", alias="talosContract")
    initial_talos_version: str = Field(default="", alias="initialTalosVersion")
    bootstrap: BootstrapStatus | None = None
    rollouts: list[Rollout] = []
    backups: BackupsStatus | None = None
    health_checks: list[HealthCheckResult] = Field(
        default=[], alias="healthChecks", description="the newest verdict of each ClusterHealthCheck"
    )
    teardown: str = Field(default="", description="what tearing the cluster down is waiting for")
    secrets_rotation: SecretsRotationStatus | None = Field(default=None, alias="secretsRotation")
    observed_generation: int = Field(default=0, alias="observedGeneration")
    conditions: list[dict[str, Any]] = []

    @property
    def bootstrapped(self) -> bool:
        """Whether etcd has been bootstrapped (the one Bootstrap call succeeded)."""
        return self.bootstrap is not None and bool(self.bootstrap.completed_at)


class RollingStrategy(BaseModel):
    model_config = _STRICT

    max_parallelism: int = Field(default=1, ge=1, alias="maxParallelism")


class Strategy(BaseModel):
    """How many machines change at once: ``Rolling`` by ``maxParallelism``, or ``Unset``: all at once."""

    model_config = _STRICT

    type: Literal["Rolling", "Unset"] = "Rolling"
    rolling: RollingStrategy = Field(default_factory=RollingStrategy)

    def parallelism(self, machines: int) -> int:
        return self.rolling.max_parallelism if self.type == "Rolling" else max(machines, 1)


def _unset() -> Strategy:
    return Strategy(type="Unset")


class MachineClassAllocation(BaseModel):
    model_config = _STRICT

    name: str = Field(min_length=1)
    size: int | Literal["unlimited"] = Field(default=1, description="a count, or unlimited")

    @field_validator("size", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in ("unlimited", "infinity", "∞"):
            return "unlimited"
        return value

    @field_validator("size")
    @classmethod
    def _non_negative(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 0:
            raise ValueError("size must not be negative")
        return value


class MachineSetSpec(BaseModel):
    model_config = _STRICT

    role: Role
    machines: list[str] | None = Field(default=None, description="a static list of machine UUIDs")
    machine_class: MachineClassAllocation | None = Field(default=None, alias="machineClass")
    machine_request_set: str | None = Field(
        default=None,
        alias="machineRequestSet",
        description="allocate the machines of this MachineRequestSet, as many as it requests",
    )
    update_strategy: Strategy = Field(default_factory=Strategy, alias="updateStrategy")
    delete_strategy: Strategy = Field(default_factory=_unset, alias="deleteStrategy")
    upgrade_strategy: Strategy = Field(default_factory=Strategy, alias="upgradeStrategy")
    bootstrap_spec: BootstrapSpec | None = Field(
        default=None, alias="bootstrapSpec", description="control planes: restore etcd from this backup"
    )
    system_extensions: list[str] = Field(
        default_factory=list, alias="systemExtensions", description="added to the cluster's extensions"
    )

    @model_validator(mode="after")
    def _one_source(self) -> MachineSetSpec:
        if self.bootstrap_spec is not None and self.role != "controlplane":
            raise ValueError("spec.bootstrapSpec is for control plane sets only")
        sources = [self.machines, self.machine_class, self.machine_request_set]
        if sum(source is not None for source in sources) > 1:
            raise ValueError(
                "a machine set takes its machines from one source: spec.machines, spec.machineClass or "
                "spec.machineRequestSet"
            )
        if self.machines is not None and len(set(self.machines)) != len(self.machines):
            raise ValueError("spec.machines lists a machine twice")
        return self


class AllocationStatus(BaseModel):
    """Why a machine set has fewer machines than it wants, in words a user can act on."""

    model_config = _STRICT

    missing: list[str] = []
    reason: str = ""


class MachineSetStatus(WithConditions):
    model_config = _STRICT

    phase: ClusterPhase = "Provisioning"
    machines: MachineCounts = Field(default_factory=MachineCounts)
    allocation: AllocationStatus | None = None
    observed_generation: int = Field(default=0, alias="observedGeneration")
    conditions: list[dict[str, Any]] = []


class MachineSetNodeSpec(BaseModel):
    model_config = _STRICT

    locked: bool = Field(default=False, description="a locked machine gets no updates until unlocked")
    install_disk: str = Field(
        default="", alias="installDisk", description="the disk Talos installs to; empty: the machine's first"
    )

    @field_validator("install_disk")
    @classmethod
    def _device(cls, value: str) -> str:
        if value and not re.match(r"^/dev/[^\s]+$", value):
            raise ValueError(f"invalid install disk {value!r}: expected a device path, e.g. /dev/sda")
        return value


class ClusterMachineSpec(BaseModel):
    model_config = _STRICT

    role: Role
    talos_version: str = Field(alias="talosVersion")
    kubernetes_version: str = Field(alias="kubernetesVersion")


class ApplyStatus(BaseModel):
    """The last config apply: kept, with its error, until a later attempt succeeds."""

    model_config = _STRICT

    attempts: int = 0
    last_error: str = Field(default="", alias="lastError")
    last_error_time: str = Field(default="", alias="lastErrorTime")
    applied_at: str = Field(default="", alias="appliedAt")
    rebooting: bool = Field(default=False, description="the last apply needed a reboot, not yet done")


class UpgradeStatus(BaseModel):
    """The Talos upgrade of one machine: asked for once; a failure stays until the target changes."""

    model_config = _STRICT

    target: str
    from_version: str = Field(alias="fromVersion")
    requested_at: str = Field(alias="requestedAt")
    error: str = ""


class ClusterMachineStatus(WithConditions):
    model_config = _STRICT

    stage: Stage = "Unknown"
    ready: bool = False
    config_hash: str = Field(default="", alias="configHash", description="the config last applied")
    apply: ApplyStatus = Field(default_factory=ApplyStatus)
    upgrade: UpgradeStatus | None = None
    etcd_member: bool = Field(default=False, alias="etcdMember")
    talos_version: str = Field(default="", alias="talosVersion")
    teardown: str = Field(default="", description="what tearing the machine down is waiting for")
    conditions: list[dict[str, Any]] = []


class ClusterMachineConfigSpec(BaseModel):
    model_config = _STRICT

    config: str = Field(min_length=1, description="the whole Talos machine config, YAML")
    hash: str = Field(description="SHA-256 of the config")
    talos_contract: str = Field(alias="talosContract")
    talos_version: str = Field(default="", alias="talosVersion", description="the installer it names")
    kubernetes_version: str = Field(default="", alias="kubernetesVersion")


_CLUSTER = PrinterColumn("Cluster", label_path(CLUSTER_LABEL))


def _ready_of_total(obj: dict[str, Any]) -> str:
    machines = (obj.get("status") or {}).get("machines") or {}
    wanted = machines.get("wanted")
    total = machines.get("total") or 0
    return f"{machines.get('ready') or 0}/{wanted if wanted is not None else total}"


CLUSTER = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="Cluster",
    plural="clusters",
    spec_model=ClusterSpec,
    status_model=ClusterStatus,
    categories=("herder",),
    printer_columns=(
        PrinterColumn("Phase", ".status.phase"),
        condition_column("Ready"),
        PrinterColumn("Machines", ".status.machines", compute=_ready_of_total),
        PrinterColumn("Talos", ".spec.talosVersion"),
        PrinterColumn("Kubernetes", ".spec.kubernetesVersion"),
        PrinterColumn("Endpoint", ".status.endpoint", priority=1),
        condition_reason_column("Ready", "Message"),
    ),
    description="A Talos Kubernetes cluster: versions, features, and the machine sets that make it up.",
)

MACHINE_SET = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="MachineSet",
    plural="machinesets",
    spec_model=MachineSetSpec,
    status_model=MachineSetStatus,
    short_names=("ms",),
    categories=("herder",),
    printer_columns=(
        _CLUSTER,
        PrinterColumn("Role", ".spec.role"),
        PrinterColumn("Phase", ".status.phase"),
        condition_column("Ready"),
        PrinterColumn("Machines", ".status.machines", compute=_ready_of_total),
        condition_reason_column("Ready", "Message"),
    ),
    description="The machines of one role in a cluster: a static list, a machine class, or by hand.",
)

MACHINE_SET_NODE = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="MachineSetNode",
    plural="machinesetnodes",
    spec_model=MachineSetNodeSpec,
    short_names=("msn",),
    categories=("herder",),
    printer_columns=(
        _CLUSTER,
        PrinterColumn("Machine-Set", label_path(MACHINE_SET_LABEL)),
        PrinterColumn("Locked", ".spec.locked"),
    ),
    description="Binds one machine (by UUID, the object's name) to one machine set.",
)

CLUSTER_MACHINE = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="ClusterMachine",
    plural="clustermachines",
    spec_model=ClusterMachineSpec,
    status_model=ClusterMachineStatus,
    categories=("herder",),
    printer_columns=(
        _CLUSTER,
        PrinterColumn("Machine-Set", label_path(MACHINE_SET_LABEL)),
        PrinterColumn("Role", ".spec.role"),
        PrinterColumn("Stage", ".status.stage"),
        condition_column("Ready"),
        PrinterColumn("Talos", ".status.talosVersion"),
        condition_reason_column("Ready", "Message"),
    ),
    description="A machine as a member of a cluster: its config, its state, its etcd membership.",
)

CLUSTER_MACHINE_CONFIG = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="ClusterMachineConfig",
    plural="clustermachineconfigs",
    spec_model=ClusterMachineConfigSpec,
    sensitive=True,
    description="The generated Talos config of one cluster machine; sealed at rest, never served to users.",
)

CLUSTER_KINDS = (CLUSTER, MACHINE_SET, MACHINE_SET_NODE, CLUSTER_MACHINE, CLUSTER_MACHINE_CONFIG)
