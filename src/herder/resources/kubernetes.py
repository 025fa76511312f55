"""Core ``v1`` Kubernetes kinds as the emulator's per-cluster Kubernetes API serves them: Node, Pod, ConfigMap,
Secret, Service (and Namespace from ``core``), with the columns ``kubectl get`` prints for them.

The models type the fields the emulator and its clients use and keep every other field Kubernetes defines
(a Pod spec has hundreds), so that what a client writes is what it reads back.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from herder.resources.core import NAMESPACE
from herder.resources.object import Resource
from herder.resources.registry import KindInfo, KindRegistry, PrinterColumn

_OPEN = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)

LABEL_CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
ROLE_PREFIX = "node-role.kubernetes.io/"

AGE = PrinterColumn("Age", ".metadata.creationTimestamp", type="date", description="Time since creation.")
"""Placed explicitly where kubectl prints it before other columns (a node's VERSION comes after it)."""


# --- Node ---


class Taint(BaseModel):
    model_config = _OPEN

    key: str
    value: str | None = None
    effect: str = Field(pattern="^(NoSchedule|PreferNoSchedule|NoExecute)$")


class NodeSpec(BaseModel):
    model_config = _OPEN

    pod_cidr: str | None = Field(default=None, alias="podCIDR")
    pod_cidrs: list[str] | None = Field(default=None, alias="podCIDRs")
    provider_id: str | None = Field(default=None, alias="providerID")
    taints: list[Taint] | None = None
    unschedulable: bool | None = None


class NodeCondition(BaseModel):
    model_config = _OPEN

    type: str
    status: str = Field(pattern="^(True|False|Unknown)$")
    reason: str | None = None
    message: str | None = None
    last_heartbeat_time: str | None = Field(default=None, alias="lastHeartbeatTime")
    last_transition_time: str | None = Field(default=None, alias="lastTransitionTime")


class NodeAddress(BaseModel):
    model_config = _OPEN

    type: str
    address: str


class NodeSystemInfo(BaseModel):
    model_config = _OPEN

    machine_id: str = Field(default="", alias="machineID")
    system_uuid: str = Field(default="", alias="systemUUID")
    boot_id: str = Field(default="", alias="bootID")
    kernel_version: str = Field(default="", alias="kernelVersion")
    os_image: str = Field(default="", alias="osImage")
    container_runtime_version: str = Field(default="", alias="containerRuntimeVersion")
    kubelet_version: str = Field(default="", alias="kubeletVersion")
    kube_proxy_version: str = Field(default="", alias="kubeProxyVersion")
    operating_system: str = Field(default="linux", alias="operatingSystem")
    architecture: str = "amd64"


class NodeStatus(BaseModel):
    model_config = _OPEN

    capacity: dict[str, str] | None = None
    allocatable: dict[str, str] | None = None
    conditions: list[NodeCondition] | None = None
    addresses: list[NodeAddress] | None = None
    node_info: NodeSystemInfo | None = Field(default=None, alias="nodeInfo")


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    conditions = (obj.get("status") or {}).get("conditions") or ()
    return next((c for c in conditions if isinstance(c, dict) and c.get("type") == kind), None)


def node_ready(obj: dict[str, Any]) -> bool:
    ready = _condition(obj, "Ready")
    return ready is not None and ready.get("status") == "True"


def _node_status(obj: dict[str, Any]) -> str:
    # As kubectl's printer: Ready or NotReady (Unknown counts as not ready), then SchedulingDisabled.
    states = ["Ready" if node_ready(obj) else "NotReady" if _condition(obj, "Ready") else "Unknown"]
    if (obj.get("spec") or {}).get("unschedulable"):
        states.append("SchedulingDisabled")
    return ",".join(states)


def _node_roles(obj: dict[str, Any]) -> str:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    roles = {k.removeprefix(ROLE_PREFIX) for k in labels if k.startswith(ROLE_PREFIX)}
    roles.add(labels.get("kubernetes.io/role", ""))
    return ",".join(sorted(r for r in roles if r)) or "<none>"


def _node_address(kind: str) -> Any:
    def pick(obj: dict[str, Any]) -> str | None:
        addresses = (obj.get("status") or {}).get("addresses") or ()
        return next((a.get("address") for a in addresses if a.get("type") == kind), None)

    return pick


NODE = KindInfo(
    group="",
    version="v1",
    kind="Node",
    plural="nodes",
    namespaced=False,
    spec_model=NodeSpec,
    status_model=NodeStatus,
    short_names=("no",),
    field_selectors=("spec.unschedulable",),
    printer_columns=(
        PrinterColumn("Status", ".status.conditions", compute=_node_status),
        PrinterColumn("Roles", ".metadata.labels", compute=_node_roles),
        AGE,
        PrinterColumn("Version", ".status.nodeInfo.kubeletVersion"),
        PrinterColumn("Internal-IP", ".status.addresses", priority=1, compute=_node_address("InternalIP")),
        PrinterColumn("External-IP", ".status.addresses", priority=1, compute=_node_address("ExternalIP")),
        PrinterColumn("OS-Image", ".status.nodeInfo.osImage", priority=1),
        PrinterColumn("Kernel-Version", ".status.nodeInfo.kernelVersion", priority=1),
        PrinterColumn("Container-Runtime", ".status.nodeInfo.containerRuntimeVersion", priority=1),
    ),
    description="A machine registered by its kubelet.",
)


# --- Pod ---


class Container(BaseModel):
    model_config = _OPEN

    name: str
    image: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None


class PodSpec(BaseModel):
    model_config = _OPEN

    containers: list[Container] = Field(min_length=1)
    node_name: str | None = Field(default=None, alias="nodeName")
    host_network: bool | None = Field(default=None, alias="hostNetwork")
    priority_class_name: str | None = Field(default=None, alias="priorityClassName")
    tolerations: list[dict[str, Any]] | None = None


class ContainerStatus(BaseModel):
    model_config = _OPEN

    name: str
    image: str = ""
    image_id: str = Field(default="", alias="imageID")
    ready: bool = False
    restart_count: int = Field(default=0, alias="restartCount")
    started: bool | None = None
    state: dict[str, Any] | None = None


class PodStatus(BaseModel):
    model_config = _OPEN

    phase: str | None = None
    reason: str | None = None
    message: str | None = None
    conditions: list[dict[str, Any]] | None = None
    host_ip: str | None = Field(default=None, alias="hostIP")
    pod_ip: str | None = Field(default=None, alias="podIP")
    start_time: str | None = Field(default=None, alias="startTime")
    container_statuses: list[ContainerStatus] | None = Field(default=None, alias="containerStatuses")
    qos_class: str | None = Field(default=None, alias="qosClass")


def _container_statuses(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list((obj.get("status") or {}).get("containerStatuses") or ())


def _pod_ready(obj: dict[str, Any]) -> str:
    total = len((obj.get("spec") or {}).get("containers") or ())
    ready = sum(1 for s in _container_statuses(obj) if s.get("ready"))
    return f"{ready}/{total}"


def _pod_status(obj: dict[str, Any]) -> str:
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    status = obj.get("status") or {}
    for container in _container_statuses(obj):
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return str(waiting["reason"])
    return str(status.get("reason") or status.get("phase") or "Pending")


def _pod_restarts(obj: dict[str, Any]) -> int:
    return sum(int(s.get("restartCount") or 0) for s in _container_statuses(obj))


POD = KindInfo(
    group="",
    version="v1",
    kind="Pod",
    plural="pods",
    spec_model=PodSpec,
    status_model=PodStatus,
    short_names=("po",),
    categories=("all",),
    field_selectors=(
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    printer_columns=(
        PrinterColumn("Ready", ".status.containerStatuses", compute=_pod_ready),
        PrinterColumn("Status", ".status.phase", compute=_pod_status),
        PrinterColumn("Restarts", ".status.containerStatuses", type="integer", compute=_pod_restarts),
        AGE,
        PrinterColumn("IP", ".status.podIP", priority=1),
        PrinterColumn("Node", ".spec.nodeName", priority=1),
        PrinterColumn("Nominated Node", ".status.nominatedNodeName", priority=1),
        PrinterColumn("Readiness Gates", ".spec.readinessGates", priority=1),
    ),
    description="A group of containers on one node.",
)


# --- ConfigMap and Secret ---


def _base64(value: str) -> str:
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("illegal base64 data") from None
    return value


Base64Data = dict[str, Annotated[str, AfterValidator(_base64)]]


def _data_count(obj: dict[str, Any]) -> int:
    return len(obj.get("data") or {}) + len(obj.get("binaryData") or {})


CONFIG_MAP = KindInfo(
    group="",
    version="v1",
    kind="ConfigMap",
    plural="configmaps",
    extra_fields={"data": dict[str, str], "binaryData": Base64Data, "immutable": bool},
    short_names=("cm",),
    printer_columns=(PrinterColumn("Data", ".data", type="integer", compute=_data_count),),
    description="Configuration data as key-value pairs.",
)


def _fold_string_data(obj: Resource) -> Resource:
    """As the API server does on every write: ``stringData`` is merged into ``data`` (base64) and dropped,
    and a Secret without a type is ``Opaque``."""
    extra = obj.model_extra
    assert extra is not None
    string_data: dict[str, str] = extra.pop("stringData", None) or {}
    if string_data:
        data = dict(extra.get("data") or {})
        data.update({k: base64.b64encode(v.encode()).decode() for k, v in string_data.items()})
        extra["data"] = data
    if not extra.get("type"):
        extra["type"] = "Opaque"
    return obj


SECRET = KindInfo(
    group="",
    version="v1",
    kind="Secret",
    plural="secrets",
    extra_fields={"data": Base64Data, "stringData": dict[str, str], "type": str, "immutable": bool},
    printer_columns=(
        PrinterColumn("Type", ".type"),
        PrinterColumn("Data", ".data", type="integer", compute=_data_count),
    ),
    field_selectors=("type",),
    prepare=_fold_string_data,
    description="Sensitive data: passwords, tokens, keys.",
)


# --- Service ---


class ServicePort(BaseModel):
    model_config = _OPEN

    name: str | None = None
    port: int
    protocol: str = "TCP"
    target_port: int | str | None = Field(default=None, alias="targetPort")
    node_port: int | None = Field(default=None, alias="nodePort")


class ServiceSpec(BaseModel):
    model_config = _OPEN

    type: str = "ClusterIP"
    cluster_ip: str | None = Field(default=None, alias="clusterIP")
    cluster_ips: list[str] | None = Field(default=None, alias="clusterIPs")
    ports: list[ServicePort] | None = None
    selector: dict[str, str] | None = None


class ServiceStatus(BaseModel):
    model_config = _OPEN


def _service_ports(obj: dict[str, Any]) -> str:
    ports = (obj.get("spec") or {}).get("ports") or ()
    shown = [
        f"{p.get('port')}{':' + str(p['nodePort']) if p.get('nodePort') else ''}/{p.get('protocol', 'TCP')}"
        for p in ports
    ]
    return ",".join(shown) or "<none>"


def _service_selector(obj: dict[str, Any]) -> str:
    selector = (obj.get("spec") or {}).get("selector") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>"


SERVICE = KindInfo(
    group="",
    version="v1",
    kind="Service",
    plural="services",
    spec_model=ServiceSpec,
    status_model=ServiceStatus,
    short_names=("svc",),
    categories=("all",),
    printer_columns=(
        PrinterColumn("Type", ".spec.type"),
        PrinterColumn("Cluster-IP", ".spec.clusterIP"),
        PrinterColumn("External-IP", ".spec.externalIPs", compute=lambda _obj: "<none>"),
        PrinterColumn("Port(s)", ".spec.ports", compute=_service_ports),
        AGE,
        PrinterColumn("Selector", ".spec.selector", priority=1, compute=_service_selector),
    ),
    description="A stable address for a set of pods.",
)


# --- Event ---


def _event_object(obj: dict[str, Any]) -> str:
    involved = obj.get("involvedObject") or {}
    return f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"


EVENT = KindInfo(
    group="",
    version="v1",
    kind="Event",
    plural="events",
    extra_fields={
        "involvedObject": dict[str, Any],
        "reason": str,
        "message": str,
        "source": dict[str, str],
        "firstTimestamp": str | None,
        "lastTimestamp": str | None,
        "eventTime": str | None,
        "count": int,
        "type": str,
        "action": str,
        "related": dict[str, Any],
        "series": dict[str, Any],
        "reportingComponent": str,
        "reportingInstance": str,
    },
    short_names=("ev",),
    field_selectors=(
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    printer_columns=(
        PrinterColumn("Last Seen", ".lastTimestamp", type="date"),
        PrinterColumn("Type", ".type"),
        PrinterColumn("Reason", ".reason"),
        PrinterColumn("Object", ".involvedObject", compute=_event_object),
        PrinterColumn("Message", ".message"),
    ),
    description="Something that happened to an object, as its controller reported it.",
)


# --- apps/v1 DaemonSet and Deployment ---


class WorkloadSpec(BaseModel):
    model_config = _OPEN

    replicas: int | None = None
    selector: dict[str, Any]
    template: dict[str, Any]


class WorkloadStatus(BaseModel):
    model_config = _OPEN

    observed_generation: int | None = Field(default=None, alias="observedGeneration")


def _node_selector(obj: dict[str, Any]) -> str:
    spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>"


def _deployment_ready(obj: dict[str, Any]) -> str:
    status = obj.get("status") or {}
    return f"{status.get('readyReplicas') or 0}/{(obj.get('spec') or {}).get('replicas') or 0}"


DAEMON_SET = KindInfo(
    group="apps",
    version="v1",
    kind="DaemonSet",
    plural="daemonsets",
    spec_model=WorkloadSpec,
    status_model=WorkloadStatus,
    short_names=("ds",),
    categories=("all",),
    printer_columns=(
        PrinterColumn("Desired", ".status.desiredNumberScheduled", type="integer"),
        PrinterColumn("Current", ".status.currentNumberScheduled", type="integer"),
        PrinterColumn("Ready", ".status.numberReady", type="integer"),
        PrinterColumn("Up-to-date", ".status.updatedNumberScheduled", type="integer"),
        PrinterColumn("Available", ".status.numberAvailable", type="integer"),
        PrinterColumn("Node Selector", ".spec.template.spec.nodeSelector", compute=_node_selector),
    ),
    description="A pod on every node.",
)

DEPLOYMENT = KindInfo(
    group="apps",
    version="v1",
    kind="Deployment",
    plural="deployments",
    spec_model=WorkloadSpec,
    status_model=WorkloadStatus,
    short_names=("deploy",),
    categories=("all",),
    printer_columns=(
        PrinterColumn("Ready", ".status.readyReplicas", compute=_deployment_ready),
        PrinterColumn("Up-to-date", ".status.updatedReplicas", type="integer"),
        PrinterColumn("Available", ".status.availableReplicas", type="integer"),
    ),
    description="Replicas of a pod, rolled out as their template changes.",
)


# --- batch/v1 Job ---


class JobSpec(BaseModel):
    model_config = _OPEN

    template: dict[str, Any]
    backoff_limit: int | None = Field(default=None, ge=0, alias="backoffLimit")
    active_deadline_seconds: int | None = Field(default=None, ge=1, alias="activeDeadlineSeconds")


class JobStatus(BaseModel):
    model_config = _OPEN

    active: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    start_time: str | None = Field(default=None, alias="startTime")
    completion_time: str | None = Field(default=None, alias="completionTime")
    conditions: list[dict[str, Any]] | None = None


def _job_status(obj: dict[str, Any]) -> str:
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "Failed"):
            return str(condition["type"])
    return "Running"


def _job_completions(obj: dict[str, Any]) -> str:
    return (
        f"{(obj.get('status') or {}).get('succeeded') or 0}/{(obj.get('spec') or {}).get('completions') or 1}"
    )


JOB = KindInfo(
    group="batch",
    version="v1",
    kind="Job",
    plural="jobs",
    spec_model=JobSpec,
    status_model=JobStatus,
    categories=("all",),
    printer_columns=(
        PrinterColumn("Status", ".status.conditions", compute=_job_status),
        PrinterColumn("Completions", ".status.succeeded", compute=_job_completions),
    ),
    description="Pods run to completion, retried up to a limit.",
)


# --- apiextensions.k8s.io/v1 CustomResourceDefinition ---


class CustomResourceNames(BaseModel):
    model_config = _OPEN

    plural: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    kind: str = Field(pattern=r"^[A-Z][A-Za-z0-9]*$")
    singular: str | None = None
    short_names: list[str] | None = Field(default=None, alias="shortNames")
    categories: list[str] | None = None


class CustomResourceVersion(BaseModel):
    model_config = _OPEN

    name: str = Field(pattern=r"^v[0-9]+((alpha|beta)[0-9]+)?$")
    served: bool
    storage: bool


class CustomResourceDefinitionSpec(BaseModel):
    model_config = _OPEN

    group: str = Field(min_length=1)
    names: CustomResourceNames
    scope: Annotated[str, Field(pattern="^(Namespaced|Cluster)$")]
    versions: list[CustomResourceVersion] = Field(min_length=1)


class OpenStatus(BaseModel):
    model_config = _OPEN

    conditions: list[dict[str, Any]] | None = None


def _crd_established(obj: dict[str, Any]) -> str:
    found = _condition(obj, "Established")
    return str(found.get("status")) if found else "Unknown"


CUSTOM_RESOURCE_DEFINITION = KindInfo(
    group="apiextensions.k8s.io",
    version="v1",
    kind="CustomResourceDefinition",
    plural="customresourcedefinitions",
    namespaced=False,
    spec_model=CustomResourceDefinitionSpec,
    status_model=OpenStatus,
    short_names=("crd", "crds"),
    categories=("api-extensions",),
    printer_columns=(PrinterColumn("Established", ".status.conditions", compute=_crd_established),),
    description="A kind of one's own, served by the API server once it is established.",
)


KINDS = (
    NAMESPACE,
    NODE,
    POD,
    CONFIG_MAP,
    SECRET,
    SERVICE,
    EVENT,
    DAEMON_SET,
    DEPLOYMENT,
    JOB,
    CUSTOM_RESOURCE_DEFINITION,
)


def kubernetes_registry() -> KindRegistry:
    """A registry of the core kinds one emulated cluster serves."""
    return KindRegistry(KINDS)
