"""Machines: the Talos machines herder knows (Machine), how an endpoint becomes one
(MachineRegistration), and the label selectors that group them for allocation (MachineClass).

A Machine is named by the UUID its Talos reports (``SystemInformations.hardware.talos.dev``), so a machine
is one object wherever it is reached from. Its ``spec`` is what herder is asked to do with it (where its
Talos API is, power); its ``status`` is what herder last learnt from it over that API.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from herder.resources.configuration import GROUP, VERSION
from herder.resources.registry import KindInfo, PrinterColumn, label_path
from herder.resources.status import WithConditions, condition_column

_STRICT = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

# Labels herder sets on a Machine while it belongs to a cluster (and users may select on).
CLUSTER_LABEL = "herder.dev/cluster"
MACHINE_SET_LABEL = "herder.dev/machine-set"
CLUSTER_MACHINE_LABEL = "herder.dev/cluster-machine"
MACHINE_LABEL = "herder.dev/machine"
ROLE_LABEL = "herder.dev/role"
# Set by an Admin (``herder machine release UUID --force``): let the machine go without resetting it.
FORCE_RELEASE_ANNOTATION = "herder.dev/force-release"

# A machine's lifecycle stage, as herder reports it.
Stage = Literal[
    "Unknown",
    "Maintenance",
    "Installing",
    "Booting",
    "Running",
    "Rebooting",
    "Upgrading",
    "Resetting",
    "ShuttingDown",
    "PoweredOff",
    "Unreachable",
]

_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-]+):(\d{1,5})$")
DEFAULT_TALOS_PORT = 50000


def normalize_endpoint(text: str) -> str:
    """``IP:PORT`` (``[v6]:PORT`` for IPv6) from ``IP``, ``IP:PORT`` or ``[v6]:PORT``; the port defaults to
    Talos's 50000. Raises ``ValueError`` saying what is wrong."""
    value = text.strip()
    if not value:
        raise ValueError("an endpoint is IP or IP:PORT, e.g. 10.5.0.2:50000")
    if _HOST_PORT.match(value) is None:
        if value.count(":") > 1 and not value.startswith("["):
            value = f"[{value}]"  # a bare IPv6 address
        value = f"{value}:{DEFAULT_TALOS_PORT}"
    match = _HOST_PORT.match(value)
    if match is None:
        raise ValueError(f"invalid endpoint {text!r}: expected IP or IP:PORT, e.g. 10.5.0.2:50000")
    port = int(match.group(2))
    if not 0 < port < 65536:
        raise ValueError(f"invalid endpoint {text!r}: port {port} is out of range")
    return value


Endpoint = Annotated[str, Field(description="the Talos API endpoint, IP:PORT")]


class Power(BaseModel):
    """What herder is asked to do with a machine's power (its provider carries it out)."""

    model_config = _STRICT

    on: bool = True
    reboot_request_id: str = Field(default="", alias="rebootRequestID", max_length=128)


class MachineSpec(BaseModel):
    model_config = _STRICT

    endpoint: Endpoint = ""
    power: Power | None = None

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        return normalize_endpoint(value) if value else value


class Disk(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)

    name: str = ""
    size: int = 0
    model: str = ""
    serial: str = ""
    transport: str = ""


class Hardware(BaseModel):
    model_config = _STRICT

    cpus: int = 0
    memory_mib: int = Field(default=0, alias="memoryMiB")
    disks: list[Disk] = []
    manufacturer: str = ""
    product: str = ""


class PowerStatus(BaseModel):
    model_config = _STRICT

    on: bool = True
    last_reboot_id: str = Field(default="", alias="lastRebootID")


class MachineStatus(WithConditions):
    model_config = _STRICT

    connected: bool = False
    stage: Stage = "Unknown"
    maintenance: bool = False
    talos_version: str = Field(default="", alias="talosVersion")
    hostname: str = ""
    addresses: list[str] = []
    hardware: Hardware | None = None
    power: PowerStatus | None = None
    last_error: str = Field(default="", alias="lastError")
    connected_at: str = Field(
        default="",
        alias="connectedAt",
        description="when the machine was last reached anew, after a boot or a loss (herder's own "
        "reconnects, for new credentials, keep it)",
    )
    conditions: list[dict[str, Any]] = []

    @property
    def running(self) -> bool:
        """Whether herder reaches the machine and it runs its config."""
        return self.connected and self.stage == "Running"

    @property
    def in_maintenance(self) -> bool:
        """Whether herder reaches the machine and it waits, in maintenance mode, for a config."""
        return self.connected and self.stage == "Maintenance"


class MachineRegistrationSpec(BaseModel):
    model_config = _STRICT

    endpoint: Endpoint

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        return normalize_endpoint(value)


class MachineRegistrationStatus(WithConditions):
    model_config = _STRICT

    machine: str = Field(default="", description="the UUID of the machine found at the endpoint")
    attempts: int = 0
    last_error: str = Field(default="", alias="lastError")
    conditions: list[dict[str, Any]] = []


def registration_name(endpoint: str) -> str:
    """The name of the MachineRegistration of an endpoint: one per endpoint, so adding twice is harmless."""
    return re.sub(r"[^a-z0-9]+", "-", normalize_endpoint(endpoint).lower()).strip("-")


class MatchExpression(BaseModel):
    model_config = _STRICT

    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = []

    @model_validator(mode="after")
    def _values(self) -> MatchExpression:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class LabelSelectorSpec(BaseModel):
    """A Kubernetes label selector (``matchLabels``, ``matchExpressions``)."""

    model_config = _STRICT

    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: list[MatchExpression] = Field(default_factory=list, alias="matchExpressions")

    def to_selector_string(self) -> str:
        """The same selector in the string syntax of ``kubectl get -l``."""
        terms = [f"{k}={v}" for k, v in sorted(self.match_labels.items())]
        for e in self.match_expressions:
            match e.operator:
                case "In":
                    terms.append(f"{e.key} in ({','.join(e.values)})")
                case "NotIn":
                    terms.append(f"{e.key} notin ({','.join(e.values)})")
                case "Exists":
                    terms.append(e.key)
                case "DoesNotExist":
                    terms.append(f"!{e.key}")
        return ",".join(terms)


class AutoProvision(BaseModel):
    """Machines made on demand by an infra provider, instead of selected from registered ones."""

    model_config = _STRICT

    provider_id: str = Field(alias="providerID", min_length=1)
    provider_data: dict[str, Any] | str | None = Field(default=None, alias="providerData")
    kernel_args: list[str] = Field(default_factory=list, alias="kernelArgs")


class MachineClassSpec(BaseModel):
    model_config = _STRICT

    selector: LabelSelectorSpec | None = None
    auto_provision: AutoProvision | None = Field(default=None, alias="autoProvision")
    description: str = ""

    @model_validator(mode="after")
    def _one_source(self) -> MachineClassSpec:
        if (self.selector is None) == (self.auto_provision is None):
            raise ValueError("a machine class has either spec.selector or spec.autoProvision, not both")
        return self


def _memory(obj: dict[str, Any]) -> str:
    mib = ((obj.get("status") or {}).get("hardware") or {}).get("memoryMiB") or 0
    return f"{mib / 1024:.1f}GiB" if mib else ""


MACHINE = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="Machine",
    plural="machines",
    spec_model=MachineSpec,
    status_model=MachineStatus,
    short_names=("mach",),
    categories=("herder",),
    printer_columns=(
        PrinterColumn("Cluster", label_path(CLUSTER_LABEL)),
        PrinterColumn("Stage", ".status.stage"),
        condition_column("Connected"),
        PrinterColumn("Talos", ".status.talosVersion"),
        PrinterColumn("Endpoint", ".spec.endpoint"),
        PrinterColumn("Hostname", ".status.hostname", priority=1),
        PrinterColumn("CPUs", ".status.hardware.cpus", type="integer", priority=1),
        PrinterColumn("Memory", ".status.hardware", priority=1, compute=_memory),
        PrinterColumn("Error", ".status.lastError", priority=1),
    ),
    field_selectors=("status.stage",),
    description="A Talos machine herder reaches over its Talos API; named by the machine's UUID.",
)

MACHINE_REGISTRATION = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="MachineRegistration",
    plural="machineregistrations",
    spec_model=MachineRegistrationSpec,
    status_model=MachineRegistrationStatus,
    categories=("herder",),
    printer_columns=(
        PrinterColumn("Endpoint", ".spec.endpoint"),
        PrinterColumn("Machine", ".status.machine"),
        condition_column("Ready"),
        PrinterColumn("Error", ".status.lastError"),
    ),
    description="A Talos endpoint to register: herder connects in maintenance mode and makes its Machine.",
)


def _class_source(obj: dict[str, Any]) -> str:
    spec = obj.get("spec") or {}
    if spec.get("autoProvision"):
        return f"provider {spec['autoProvision'].get('providerID', '')}"
    try:
        return LabelSelectorSpec.model_validate(spec.get("selector") or {}).to_selector_string() or "<all>"
    except ValueError:
        return ""


MACHINE_CLASS = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="MachineClass",
    plural="machineclasses",
    spec_model=MachineClassSpec,
    short_names=("mc",),
    categories=("herder",),
    printer_columns=(
        PrinterColumn("Machines", ".spec", compute=_class_source),
        PrinterColumn("Description", ".spec.description", priority=1),
    ),
    description="A kind of machine: a label selector over Machines, or machines an infra provider makes.",
)

MACHINE_KINDS = (MACHINE, MACHINE_REGISTRATION, MACHINE_CLASS)
