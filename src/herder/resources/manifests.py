"""What herder keeps in a cluster's Kubernetes besides Kubernetes itself: ClusterManifest (objects herder
server-side-applies into the workload cluster, with the inventory of what it applied) and ClusterHealthCheck
(a batch/v1 Job herder runs there at an interval, whose verdict holds upgrades). Both are labelled with
their cluster (``herder.dev/cluster``); templates make them from ``kubernetes.manifests`` and
``kubernetes.healthchecks``, and kubectl users may write them directly.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from herder.resources.backups import duration_seconds
from herder.resources.configuration import GROUP, VERSION
from herder.resources.machines import CLUSTER_LABEL
from herder.resources.registry import KindInfo, PrinterColumn, label_path
from herder.resources.status import WithConditions, condition_column, condition_reason_column

_STRICT = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

SYNC_REQUESTED_ANNOTATION = "herder.dev/sync-requested"
"""Set (to a time) on a ClusterManifest by ``herder cluster kubernetes manifest-sync``: sync it now."""
SKIP_PRE_CHECKS_ANNOTATION = "herder.dev/skip-pre-checks"
"""On a Cluster: a Kubernetes upgrade goes ahead despite its pre-checks (the write is audited)."""
FIELD_MANAGER = "herder"
"""The field manager of herder's server-side applies in workload clusters."""
MIN_HEALTH_CHECK_INTERVAL = 5.0
DEFAULT_HEALTH_CHECK_INTERVAL = "30s"
ManifestMode = Literal["full", "one-time"]


def object_problems(obj: Any) -> list[tuple[str, str]]:
    """(field, reason) for each thing that keeps ``obj`` from being a Kubernetes object one can apply."""
    if not isinstance(obj, dict):
        return [("", f"a Kubernetes object is a map, not a {type(obj).__name__}")]
    out = []
    for key in ("apiVersion", "kind"):
        value = obj.get(key)
        if not isinstance(value, str) or not value.strip():
            out.append((key, "is required: every object names its apiVersion and kind"))
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(metadata, dict):
        out.append(("metadata", "is required, with the object's name"))
    elif not isinstance(name, str) or not name.strip():
        out.append(("metadata.name", "is required: herder applies objects by name"))
    elif metadata.get("namespace") is not None and not isinstance(metadata.get("namespace"), str):
        out.append(("metadata.namespace", "must be a string"))
    return out


class ClusterManifestSpec(BaseModel):
    model_config = _STRICT

    mode: ManifestMode = Field(
        default="full",
        description="full: kept as written (drift reverted, removed objects pruned); one-time: applied once",
    )
    namespace: str = Field(default="", description="the namespace of namespaced objects that name none")
    manifests: list[dict[str, Any]] = Field(description="the Kubernetes objects, applied in dependency order")

    @field_validator("manifests")
    @classmethod
    def _objects(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        problems = [
            f"[{i}]{'.' + field if field else ''}: {reason}"
            for i, obj in enumerate(value)
            for field, reason in object_problems(obj)
        ]
        if problems:
            raise ValueError("; ".join(problems))
        seen: set[tuple[str, str, str, str]] = set()
        for i, obj in enumerate(value):
            key = object_key(obj)
            if key in seen:
                raise ValueError(f"[{i}]: {describe(key)} is listed twice")
            seen.add(key)
        return value


ObjectRef = tuple[str, str, str, str]
"""(apiVersion, kind, namespace, name) of an object in a workload cluster."""


def object_key(obj: dict[str, Any], namespace: str = "") -> ObjectRef:
    metadata = obj.get("metadata") or {}
    return (
        str(obj.get("apiVersion", "")),
        str(obj.get("kind", "")),
        str(metadata.get("namespace") or namespace),
        str(metadata.get("name", "")),
    )


def describe(ref: ObjectRef) -> str:
    """``ConfigMap team/settings (v1)``."""
    api_version, kind, namespace, name = ref
    return f"{kind} {namespace + '/' if namespace else ''}{name} ({api_version})"


class InventoryEntry(BaseModel):
    """An object herder applied and keeps track of (to prune it when the manifest drops it)."""

    model_config = _STRICT

    api_version: str = Field(alias="apiVersion")
    kind: str
    namespace: str = ""
    name: str
    uid: str = ""

    @property
    def ref(self) -> ObjectRef:
        return (self.api_version, self.kind, self.namespace, self.name)


ObjectState = Literal["Applied", "Pruned", "Failed", "Pending"]


class ObjectResult(BaseModel):
    """What the last sync did with one object, in Kubernetes' words when it failed."""

    model_config = _STRICT

    api_version: str = Field(alias="apiVersion")
    kind: str
    namespace: str = ""
    name: str
    state: ObjectState
    message: str = ""

    @property
    def ref(self) -> ObjectRef:
        return (self.api_version, self.kind, self.namespace, self.name)


class ClusterManifestStatus(WithConditions):
    model_config = _STRICT

    inventory: list[InventoryEntry] = []
    objects: list[ObjectResult] = []
    last_sync_time: str = Field(default="", alias="lastSyncTime")
    observed_generation: int = Field(default=0, alias="observedGeneration")
    conditions: list[dict[str, Any]] = []


class ClusterHealthCheckSpec(BaseModel):
    model_config = _STRICT

    job: dict[str, Any] = Field(description="the batch/v1 Job to run in the workload cluster")
    interval: str = Field(
        default=DEFAULT_HEALTH_CHECK_INTERVAL, description="how often the Job runs (at least 5s)"
    )

    @field_validator("interval")
    @classmethod
    def _interval(cls, value: str) -> str:
        if duration_seconds(value) < MIN_HEALTH_CHECK_INTERVAL:
            raise ValueError(
                f"interval {value!r} is shorter than the minimum of {MIN_HEALTH_CHECK_INTERVAL:g}s"
            )
        return value.strip()

    @field_validator("job")
    @classmethod
    def _job(cls, value: dict[str, Any]) -> dict[str, Any]:
        problems = job_problems(value)
        if problems:
            raise ValueError("; ".join(f"{f}: {r}" if f else r for f, r in problems))
        return value

    @property
    def interval_seconds(self) -> float:
        return duration_seconds(self.interval)


def job_problems(job: Any) -> list[tuple[str, str]]:
    """(field, reason) for each thing that keeps ``job`` from being a Job herder can run."""
    if not isinstance(job, dict):
        return [("", f"a Job is a map, not a {type(job).__name__}")]
    out = []
    if job.get("apiVersion", "batch/v1") != "batch/v1" or job.get("kind", "Job") != "Job":
        out.append(("kind", "a health check runs a batch/v1 Job"))
    spec = job.get("spec")
    template = spec.get("template") if isinstance(spec, dict) else None
    pod = template.get("spec") if isinstance(template, dict) else None
    containers = pod.get("containers") if isinstance(pod, dict) else None
    if not isinstance(containers, list) or not containers:
        out.append(
            ("spec.template.spec.containers", "is required: the Job's pod runs at least one container")
        )
    return out


class HealthCheckResult(BaseModel):
    """The newest verdict of one health check of a cluster."""

    model_config = _STRICT

    name: str
    state: Literal["Pending", "Running", "Passed", "Failed"] = "Pending"
    message: str = ""
    job: str = Field(default="", description="the Job of the newest run (namespace/name)")
    last_run_time: str = Field(default="", alias="lastRunTime")
    last_passed_time: str = Field(default="", alias="lastPassedTime")

    @property
    def passed(self) -> bool:
        return self.state == "Passed"


_CLUSTER = PrinterColumn("Cluster", label_path(CLUSTER_LABEL))

CLUSTER_MANIFEST = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="ClusterManifest",
    plural="clustermanifests",
    spec_model=ClusterManifestSpec,
    status_model=ClusterManifestStatus,
    short_names=("cmf",),
    categories=("herder",),
    printer_columns=(
        _CLUSTER,
        PrinterColumn("Mode", ".spec.mode"),
        condition_column("Ready"),
        PrinterColumn(
            "Objects",
            ".status.inventory",
            compute=lambda o: len((o.get("status") or {}).get("inventory") or ()),
        ),
        condition_reason_column("Ready", "Message"),
    ),
    description="Kubernetes objects herder server-side-applies into a cluster, pruned when dropped (full mode).",
)

CLUSTER_HEALTH_CHECK = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="ClusterHealthCheck",
    plural="clusterhealthchecks",
    spec_model=ClusterHealthCheckSpec,
    short_names=("chc",),
    categories=("herder",),
    printer_columns=(_CLUSTER, PrinterColumn("Interval", ".spec.interval")),
    description="A Job herder runs in a cluster at an interval; upgrades wait while it fails.",
)

MANIFEST_KINDS = (CLUSTER_MANIFEST, CLUSTER_HEALTH_CHECK)
