"""Machines on demand: infra providers (InfraProvider), how their machines reach herder (JoinConfig), and
the requests they fulfil (MachineRequestSet, MachineRequest).

A MachineRequestSet keeps ``machineCount`` MachineRequests named ``<set>-<random>``; an infra provider (a
separate process, in any language) watches the requests labelled with its id, creates one machine per
request and reports on the request's status, which only it may write; herder makes the Machine of the
UUID reported and labels it with the request, its set and the provider. Who writes which field, and the
finalizers each side holds, are the protocol of ``docs/providers.md``.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from herder.resources.access import HIDDEN_LABEL, INFRA_PROVIDER_LABEL
from herder.resources.configuration import GROUP, VERSION
from herder.resources.object import Resource
from herder.resources.registry import KindInfo, PrinterColumn, label_path
from herder.resources.schematic import Customization, MetaValue, Schematic, SystemExtensions
from herder.resources.status import WithConditions, condition_column, condition_reason_column

_STRICT = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

MACHINE_REQUEST_LABEL = "herder.dev/machine-request"
MACHINE_REQUEST_SET_LABEL = "herder.dev/machine-request-set"
PROVIDER_FINALIZER = "herder.dev/infra-provider"
"""The provider's finalizer on a MachineRequest: it drops it once the machine is destroyed."""
RELEASE_FINALIZER = "herder.dev/machine-release"
"""herder's finalizer on a MachineRequest: dropped once its machine has left its cluster."""
RELEASING_ANNOTATION = "herder.dev/releasing"
"""On the Machine of a request being deleted: no machine set may take it any more."""
CONFLICT = "Conflict"
"""herder's condition on a MachineRequest whose machine another request holds (reason ``MachineClaimed``),
and on its InfraProvider while any of its requests is in that state."""
MACHINE_CLAIMED = "MachineClaimed"

_VERSION = re.compile(r"^v?\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def talos_version(value: str) -> str:
    """A Talos version as herder keeps it (``v1.13.2``); refuses what is not one."""
    value = value.strip()
    if not _VERSION.match(value):
        raise ValueError(f"invalid Talos version {value!r}: expected X.Y.Z, e.g. v1.13.2")
    return value if value.startswith("v") else "v" + value


def valid_provider_id(value: str) -> bool:
    """A provider id is a DNS label: it is a label value, a name part and a finalizer owner."""
    return bool(_DNS_LABEL.match(value))


# --- InfraProvider ---


class ManagedSize(BaseModel):
    """One size of managed control plane: how many machines, and what the provider makes them of."""

    model_config = _STRICT

    machines: int = Field(ge=1, le=7, description="control plane machines: 1, 3, 5 or 7 (an etcd quorum)")
    provider_data: dict[str, Any] = Field(
        default_factory=dict, alias="providerData", description="the provider data of each machine"
    )

    @field_validator("machines")
    @classmethod
    def _odd(cls, value: int) -> int:
        if value % 2 == 0:
            raise ValueError(
                f"{value} control planes cannot keep an etcd quorum through a failure: use 1, 3, 5 or 7"
            )
        return value

    @field_validator("provider_data", mode="before")
    @classmethod
    def _data(cls, value: Any) -> Any:
        return provider_data_object(value)


class ManagedControlPlanes(BaseModel):
    """What a provider offers as managed control planes (the platform's, written by Support only)."""

    model_config = _STRICT

    sizes: dict[str, ManagedSize] = Field(min_length=1, description="by name, e.g. xs, s, m")
    talos_versions: list[str] = Field(
        alias="talosVersions", min_length=1, description="the only Talos versions managed clusters may run"
    )
    register_nodes: bool = Field(
        default=True, alias="registerNodes", description="control planes register as Kubernetes nodes"
    )

    @field_validator("sizes")
    @classmethod
    def _names(cls, value: dict[str, ManagedSize]) -> dict[str, ManagedSize]:
        for name in value:
            if not _DNS_LABEL.match(name):
                raise ValueError(f"invalid size name {name!r}: a DNS label (lowercase letters, digits, -)")
        return value

    @field_validator("talos_versions")
    @classmethod
    def _versions(cls, value: list[str]) -> list[str]:
        return [talos_version(v) for v in value]


class InfraProviderSpec(BaseModel):
    model_config = _STRICT

    display_name: str = Field(default="", alias="displayName")
    description: str = ""
    hidden: bool = Field(default=False, description="invisible to cluster users (name must begin herder-)")
    config: dict[str, Any] | None = Field(
        default=None,
        description="the provider's own settings (credentials, region…): sealed at rest, readable by "
        "Admins, Support and the provider only; checked against status.configSchema",
    )
    managed_control_planes: ManagedControlPlanes | None = Field(
        default=None,
        alias="managedControlPlanes",
        description="the managed control planes offered on this provider's machines (Support only)",
    )


class ProviderCapabilities(BaseModel):
    model_config = _STRICT

    power: bool = Field(default=False, description="the provider powers its machines on and off, and reboots")


class InfraProviderStatus(WithConditions):
    """Written by the provider, but for ``conditions``, which herder keeps."""

    model_config = _STRICT

    schema_: dict[str, Any] | str | None = Field(
        default=None, alias="schema", description="the JSON schema of request providerData"
    )
    config_schema: dict[str, Any] | str | None = Field(
        default=None, alias="configSchema", description="the JSON schema of spec.config"
    )
    version: str = ""
    last_heartbeat: str = Field(default="", alias="lastHeartbeat")
    heartbeat_interval_seconds: float = Field(default=0, alias="heartbeatIntervalSeconds", ge=0)
    capabilities: ProviderCapabilities = Field(default_factory=ProviderCapabilities)
    conditions: list[dict[str, Any]] = []


def _provider_labels(obj: Resource) -> Resource:
    """An InfraProvider is labelled with its own id (so the provider's scope reaches it) and hidden as
    its spec says."""
    obj.metadata.labels[INFRA_PROVIDER_LABEL] = obj.name
    if (obj.spec or {}).get("hidden"):
        obj.metadata.labels[HIDDEN_LABEL] = "true"
    else:
        obj.metadata.labels.pop(HIDDEN_LABEL, None)
    return obj


INFRA_PROVIDER = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="InfraProvider",
    plural="infraproviders",
    namespaced=False,
    spec_model=InfraProviderSpec,
    status_model=InfraProviderStatus,
    short_names=("ip",),
    categories=("herder",),
    # Sealed whole at rest, for spec.config; the API leaves spec.config out for those who may not read it.
    sensitive=True,
    prepare=_provider_labels,
    printer_columns=(
        PrinterColumn("Display-Name", ".spec.displayName"),
        condition_column("Connected"),
        condition_column("Ready"),
        PrinterColumn("Version", ".status.version"),
        PrinterColumn("Heartbeat", ".status.lastHeartbeat", priority=1),
        condition_reason_column("Ready", "Message"),
    ),
    description="An infra provider: a process that creates and destroys machines for MachineRequests.",
)


# --- JoinConfig ---


class JoinConfigSpec(BaseModel):
    model_config = _STRICT

    endpoint: str = Field(description="herder's API, as the provider's machines reach it")
    token: str = Field(min_length=1, description="the provider's join token")
    kernel_args: list[str] = Field(default_factory=list, alias="kernelArgs")


JOIN_CONFIG = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="JoinConfig",
    plural="joinconfigs",
    namespaced=False,
    spec_model=JoinConfigSpec,
    sensitive=True,
    categories=("herder",),
    printer_columns=(PrinterColumn("Endpoint", ".spec.endpoint"),),
    description="How the machines of one infra provider reach herder (named by the provider's id).",
)


# --- MachineRequestSet and MachineRequest ---


class SchematicSpec(BaseModel):
    """What goes into the boot and installer image of a requested machine."""

    model_config = _STRICT

    extensions: list[str] = Field(default_factory=list, description="official system extensions")
    extra_kernel_args: list[str] = Field(default_factory=list, alias="extraKernelArgs")
    meta: list[MetaValue] = []


def provider_data_object(value: Any) -> dict[str, Any]:
    """Provider data as an object: given as one, or as its YAML text (as Omni's classes hold it)."""
    if isinstance(value, str):
        try:
            value = yaml.safe_load(value) if value.strip() else {}
        except yaml.YAMLError as exc:
            raise ValueError(f"not YAML: {exc}") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("must be an object (or the YAML of one)")
    return value


class MachineRequestSpec(BaseModel):
    model_config = _STRICT

    provider_id: str = Field(alias="providerID", min_length=1)
    talos_version: str = Field(alias="talosVersion")
    schematic: SchematicSpec = Field(default_factory=SchematicSpec)
    provider_data: dict[str, Any] = Field(
        default_factory=dict, alias="providerData", description="checked against the provider's schema"
    )
    kernel_args: list[str] = Field(default_factory=list, alias="kernelArgs")
    machine_labels: dict[str, str] = Field(
        default_factory=dict, alias="machineLabels", description="labels herder puts on the machines"
    )

    @field_validator("provider_id")
    @classmethod
    def _provider(cls, value: str) -> str:
        if not valid_provider_id(value):
            raise ValueError(f"invalid provider id {value!r}: a DNS label (lowercase letters, digits, -)")
        return value

    @field_validator("talos_version")
    @classmethod
    def _talos(cls, value: str) -> str:
        return talos_version(value)

    @field_validator("provider_data", mode="before")
    @classmethod
    def _data(cls, value: Any) -> Any:
        return provider_data_object(value)

    @field_validator("machine_labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if key.startswith("herder.dev/"):
                raise ValueError(f"{key}: herder.dev/ labels are herder's to set")
        return value

    def factory_schematic(self) -> Schematic:
        """The Image Factory schematic of the requested machine: its extensions, its extra kernel
        arguments and ``kernelArgs``, and its META values."""
        return Schematic(
            customization=Customization(
                extraKernelArgs=[*self.schematic.extra_kernel_args, *self.kernel_args],
                meta=self.schematic.meta,
                systemExtensions=SystemExtensions(officialExtensions=self.schematic.extensions),
            )
        )


class MachineRequestSetSpec(MachineRequestSpec):
    machine_count: int = Field(alias="machineCount", ge=0, le=10000)


Stage = Literal["Pending", "Provisioning", "Provisioned", "Failed"]


class LastError(BaseModel):
    model_config = _STRICT

    message: str
    time: str


class RequestMachine(BaseModel):
    model_config = _STRICT

    uuid: str = ""
    address: str = Field(default="", description="where herder reaches the machine's Talos API")


def _empty(conditions: list[dict[str, Any]]) -> bool:
    return not conditions


class MachineRequestStatus(WithConditions):
    """Written by the request's provider, but for ``conditions``: herder's verdicts on the request
    (``Conflict``), absent until there is one, which a provider's write keeps as it read them."""

    model_config = _STRICT

    stage: Stage = "Pending"
    step: str = Field(default="", description="the step running, or the last one")
    step_number: int = Field(default=0, alias="stepNumber", ge=0)
    steps: int = Field(default=0, ge=0)
    message: str = ""
    reason: str = Field(default="", description="why the request failed (MachineGone: destroyed outside)")
    last_error: LastError | None = Field(
        default=None, alias="lastError", description="kept across retries until an attempt succeeds"
    )
    attempts: int = Field(default=0, ge=0, description="attempts of the step that last failed")
    machine: RequestMachine | None = None
    provider_state: dict[str, Any] = Field(
        default_factory=dict, alias="providerState", description="the provider's own progress"
    )
    conditions: list[dict[str, Any]] = Field(default_factory=list, exclude_if=_empty)

    @property
    def uuid(self) -> str:
        """The UUID of the machine the provider reported, as its Machine is named (lowercase; empty until
        it reports one)."""
        return self.machine.uuid.lower() if self.machine is not None else ""

    @property
    def provisioned(self) -> bool:
        """Whether the provider made the machine and herder took it: a machine another request holds is
        not this one's."""
        return self.stage == "Provisioned" and not self.condition_true(CONFLICT)

    @property
    def detail(self) -> str:
        """What holds the request up, in a line: a conflict, its last error, or its provider's message."""
        conflict = self.condition(CONFLICT)
        if conflict is not None and conflict.status == "True":
            return conflict.message
        return self.last_error.message if self.last_error is not None else self.message


# A MachineRequestSet's Ready reasons while its requests are on their way (none refused, some not done):
# with no error, or with one of them held up by an error (retried, or another request holds its machine).
PROVISIONING = "Provisioning"
REQUESTS_FAILING = "RequestsFailing"


class MachineRequestSetStatus(WithConditions):
    model_config = _STRICT

    requests: int = 0
    provisioned: int = 0
    failed: int = 0
    observed_generation: int = Field(default=0, alias="observedGeneration")
    conditions: list[dict[str, Any]] = []


def _progress(obj: dict[str, Any]) -> str:
    status = obj.get("status") or {}
    if not status.get("steps"):
        return ""
    return f"{status.get('stepNumber', 0)}/{status['steps']} {status.get('step', '')}"


def _set_progress(obj: dict[str, Any]) -> str:
    status = obj.get("status") or {}
    return f"{status.get('provisioned', 0)}/{(obj.get('spec') or {}).get('machineCount', 0)}"


def _request_labels(obj: Resource) -> Resource:
    obj.metadata.labels[INFRA_PROVIDER_LABEL] = str((obj.spec or {}).get("providerID", ""))
    return obj


_PROVIDER = PrinterColumn("Provider", ".spec.providerID")

MACHINE_REQUEST_SET = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="MachineRequestSet",
    plural="machinerequestsets",
    spec_model=MachineRequestSetSpec,
    status_model=MachineRequestSetStatus,
    short_names=("mrs",),
    categories=("herder",),
    prepare=_request_labels,
    printer_columns=(
        _PROVIDER,
        PrinterColumn("Provisioned", ".status", compute=_set_progress),
        condition_column("Ready"),
        PrinterColumn("Talos", ".spec.talosVersion"),
        condition_reason_column("Ready", "Message"),
    ),
    description="Keep N machines of one kind from one infra provider: as many MachineRequests.",
)

MACHINE_REQUEST = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="MachineRequest",
    plural="machinerequests",
    spec_model=MachineRequestSpec,
    status_model=MachineRequestStatus,
    short_names=("mr",),
    categories=("herder",),
    prepare=_request_labels,
    printer_columns=(
        _PROVIDER,
        PrinterColumn("Set", label_path(MACHINE_REQUEST_SET_LABEL)),
        PrinterColumn("Stage", ".status.stage"),
        PrinterColumn("Step", ".status", compute=_progress),
        PrinterColumn("Attempts", ".status.attempts", type="integer"),
        PrinterColumn("Machine", ".status.machine.uuid"),
        PrinterColumn("Error", ".status.lastError.message", priority=1),
    ),
    description="One machine to create, by its infra provider; its status is the provider's to write.",
)

PROVISIONING_KINDS = (INFRA_PROVIDER, JOIN_CONFIG, MACHINE_REQUEST_SET, MACHINE_REQUEST)
