"""The documents of a cluster template, as Omni writes them: ``Cluster``, ``ControlPlane``, ``Workers`` and
``Machine``, with their patches, machine classes and strategies, decoded strictly (an unknown field is an
error, and so is a value of the wrong type).

Every Omni field is declared, so none is dropped silently. A field herder has no counterpart for is
marked ``ignored``: it is read, and reported as a warning when it asks for something. A field herder
refuses is marked ``refused`` with the reason. herder's own additions are plain fields of the same
documents (``features.kubeSpan``, ``kubernetes.endpoint``, ``ControlPlane.managed``).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

NO_COUNTERPART = "has no counterpart in herder; ignored"
RESERVED_PREFIX = "herder.dev/"

# A name that every object made from it can carry (``<cluster>-control-planes``…).
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(text: str) -> float:
    """The seconds of a Go duration (``1h30m``, ``90s``, ``0``) as Omni and omnictl write them; raises
    ``ValueError`` naming the text otherwise."""
    value = text.strip()
    if value == "0":
        return 0.0
    parts = _DURATION_PART.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise ValueError(f"invalid duration {text!r}: expected e.g. 90s, 5m or 1h30m")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


def ignored(message: str = NO_COUNTERPART, *, alias: str | None = None) -> Any:
    """A field that is read, and warned about (``message``) when it asks for something."""
    return Field(default=None, alias=alias, json_schema_extra={"ignored": message})


def refused(reason: str, *, alias: str | None = None) -> Any:
    """A field that is an error whenever it asks for something, for ``reason``."""
    return Field(default=None, alias=alias, json_schema_extra={"refused": reason})


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, alias_generator=to_camel, frozen=True)


class _Descriptors(_Document):
    """Labels and annotations of the objects a document makes; ``herder.dev/`` keys are herder's."""

    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}

    @field_validator("labels", "annotations")
    @classmethod
    def _not_reserved(cls, value: dict[str, str]) -> dict[str, str]:
        reserved = sorted(k for k in value if k.startswith(RESERVED_PREFIX))
        if reserved:
            raise ValueError(f"{', '.join(reserved)}: the prefix {RESERVED_PREFIX} is reserved for herder")
        return value


class PatchDoc(_Descriptors):
    """A Talos config patch: from a ``file`` (relative to the template, inside its folder) or ``inline``
    (a config document as a map, or, as herder also reads, the text of any patch Talos accepts)."""

    name: str = ""
    id_override: str = ""
    file: str = ""
    inline: dict[str, Any] | str | None = None

    @property
    def title(self) -> str:
        """What the patch is called: its name, else its file."""
        return self.name or self.file or self.id_override


class RollingDoc(_Document):
    max_parallelism: int | None = None


class StrategyDoc(_Document):
    type: Literal["Rolling", "Unset"] | None = None
    rolling: RollingDoc | None = None


UNLIMITED = ("unlimited", "infinity", "∞")


class MachineClassDoc(_Document):
    name: str
    size: int | str = Field(description="a count, or unlimited (also infinity, ∞)")

    @field_validator("size")
    @classmethod
    def _size(cls, value: int | str) -> int | str:
        if isinstance(value, str) and value.strip().lower() not in UNLIMITED:
            raise ValueError(f"invalid size {value!r}: a number of machines, or unlimited")
        if isinstance(value, int) and value < 0:
            raise ValueError(f"invalid size {value}: a number of machines cannot be negative")
        return value


class BootstrapSpecDoc(_Document):
    """Restore from an etcd backup: the backed-up cluster's UUID and the snapshot's name (both required)."""

    cluster_uuid: str = Field(alias="clusterUUID", min_length=1)
    snapshot: str = Field(min_length=1)


class ManagedDoc(_Document):
    """A control plane the platform runs: ``size`` of the managed control plane offering ``provider``
    (``kubectl get managedcontrolplaneofferings``); maps onto ``Cluster.spec.controlPlane.managed``."""

    enabled: bool = False
    provider: str = ""
    size: str = ""


class _Extensions(_Descriptors):
    system_extensions: list[str] | None = ignored()
    kernel_args: list[str] | None = ignored()
    patches: list[PatchDoc] = []


def _machine_id(value: str) -> str:
    try:
        uuid.UUID(value)
    except ValueError:
        raise ValueError(f"invalid machine ID {value!r}: expected the machine's UUID") from None
    return value


MachineID = Annotated[str, AfterValidator(_machine_id)]


class _MachineSetDoc(_Extensions):
    kind: str
    system_extensions: list[str] = []
    machines: list[MachineID] = []
    machine_class: MachineClassDoc | None = None
    upgrade_strategy: StrategyDoc | None = None


class ControlPlaneDoc(_MachineSetDoc):
    kind: Literal["ControlPlane"]
    name: str | None = refused("custom name is not allowed in the controlplane")
    update_strategy: StrategyDoc | None = refused(
        "updateStrategy is not allowed in the controlplane: control planes are updated one at a time"
    )
    delete_strategy: StrategyDoc | None = refused(
        "deleteStrategy is not allowed in the controlplane: control planes leave one at a time"
    )
    bootstrap_spec: BootstrapSpecDoc | None = None
    managed: ManagedDoc | None = None


DEFAULT_WORKERS = "workers"


class WorkersDoc(_MachineSetDoc):
    kind: Literal["Workers"]
    name: str = DEFAULT_WORKERS
    update_strategy: StrategyDoc | None = None
    delete_strategy: StrategyDoc | None = None
    bootstrap_spec: BootstrapSpecDoc | None = refused("bootstrapSpec is not allowed in workers")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if value == "control-planes":
            raise ValueError('the name "control-planes" cannot be used in workers')
        if not _NAME.match(value):
            raise ValueError(
                f"invalid name {value!r}: lowercase letters, digits and '-', starting and ending with "
                "a letter or digit"
            )
        return value


class InstallDoc(_Document):
    disk: str = ""
    disk_selector: Any = refused("not supported by herder: name the install disk with install.disk")

    @field_validator("disk")
    @classmethod
    def _device(cls, value: str) -> str:
        if value and not value.startswith("/dev/"):
            raise ValueError(f"invalid install disk {value!r}: expected a device path, e.g. /dev/sda")
        return value


class MachineDoc(_Extensions):
    kind: Literal["Machine"]
    name: MachineID
    locked: bool = False
    install: InstallDoc = InstallDoc()


class ManifestDoc(_Document):
    """Kubernetes objects herder applies into the cluster (a ClusterManifest): ``inline`` (a list of objects,
    or multi-document YAML text) or from a ``file`` (relative to the template, inside its folder)."""

    name: str
    inline: list[Any] | str | None = None
    file: str = ""
    mode: Literal["full", "one-time"] = "full"
    namespace: str = ""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"invalid manifest name {value!r}: lowercase letters, digits and '-'")
        return value


class HealthCheckDoc(_Document):
    """A batch/v1 Job herder runs in the cluster every ``interval`` (a ClusterHealthCheck): ``job`` inline or
    from a ``file``; named by ``name`` (or ``idOverride``)."""

    name: str = ""
    id_override: str = ""
    job: dict[str, Any] | str | None = None
    file: str = ""
    interval: str = "30s"

    @field_validator("interval")
    @classmethod
    def _interval(cls, value: str) -> str:
        if duration_seconds(value) < MIN_HEALTH_CHECK_SECONDS:
            raise ValueError(
                f"interval {value!r} is shorter than the minimum of {MIN_HEALTH_CHECK_SECONDS:g}s"
            )
        return value

    @property
    def title(self) -> str:
        return self.id_override or self.name


MIN_HEALTH_CHECK_SECONDS = 5.0


class KubernetesDoc(_Document):
    version: str
    endpoint: str = Field(default="", description="herder: the Kubernetes API URL; empty: herder's balancer")
    manifests: list[ManifestDoc] = []
    healthchecks: list[HealthCheckDoc] = []


class TalosDoc(_Document):
    version: str

    @field_validator("version")
    @classmethod
    def _v(cls, value: str) -> str:
        # Empty is left to the version policy's check (it is also the stand-in for an invalid one).
        if value and not value.startswith("v"):
            raise ValueError(f"invalid Talos version {value!r}: it starts with v, e.g. v1.13.2")
        return value


class BackupConfigurationDoc(_Document):
    """etcd backups: ``interval`` as Omni writes it (0 or none: no scheduled backups), and herder's own
    ``retention`` (how many to keep) and ``store`` (the BackupStore), all onto ``Cluster.spec.backups``."""

    interval: str | None = None
    retention: int | None = Field(default=None, ge=1)
    store: str | None = Field(default=None, min_length=1)

    @field_validator("interval")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None:
            duration_seconds(value)
        return value


class FeaturesDoc(_Document):
    disk_encryption: bool = False
    kube_span: bool = False
    enable_workload_proxy: bool | None = ignored()
    use_embedded_discovery_service: bool | None = ignored()
    disable_public_discovery_service: bool | None = ignored()
    enable_node_audit_skip: bool | None = ignored()
    backup_configuration: BackupConfigurationDoc | None = None


class ClusterDoc(_Extensions):
    kind: Literal["Cluster"]
    name: str
    system_extensions: list[str] = []
    kubernetes: KubernetesDoc
    talos: TalosDoc
    features: FeaturesDoc = FeaturesDoc()
    # Whether the cluster is locked (``herder.dev/locked``): the template owns the lock, so a sync of a
    # template without it unlocks the cluster.
    locked: bool = False

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(
                f"invalid cluster name {value!r}: lowercase letters, digits and '-', starting and ending "
                "with a letter or digit, at most 63 characters"
            )
        return value


Document = ClusterDoc | ControlPlaneDoc | WorkersDoc | MachineDoc
KINDS: dict[str, type[Document]] = {
    "Cluster": ClusterDoc,
    "ControlPlane": ControlPlaneDoc,
    "Workers": WorkersDoc,
    "Machine": MachineDoc,
}


def _asks(value: Any) -> bool:
    """Whether a value asks for something: not unset, false, zero or empty."""
    return value not in (None, False, 0, "", [], {})


def marked_fields(document: BaseModel, prefix: str = "") -> Iterator[tuple[str, str, str]]:
    """``(path, "ignored" | "refused", message)`` for every marked field of a document that asks for
    something, nested models and lists of them included."""
    for name, info in type(document).model_fields.items():
        value = getattr(document, name)
        path = f"{prefix}{info.alias or name}"
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        for mark in ("ignored", "refused"):
            if mark in extra and _asks(value):
                yield path, mark, str(extra[mark])
        if isinstance(value, BaseModel):
            yield from marked_fields(value, f"{path}.")
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, BaseModel):
                    yield from marked_fields(item, f"{path}[{index}].")


def field_catalogue() -> dict[str, list[str]]:
    """Every template field by what herder does with it (``mapped``, ``ignored``, ``refused``), per kind:
    the reference the README and ``validate`` speak from."""
    out: dict[str, list[str]] = {"mapped": [], "ignored": [], "refused": []}

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, info in model.model_fields.items():
            path = f"{prefix}{info.alias or name}"
            extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
            mark = next((m for m in ("ignored", "refused") if m in extra), None)
            nested = _nested_model(info.annotation)
            if mark:
                out[mark].append(path)
            elif nested is not None:
                walk(nested, f"{path}[]." if "list[" in str(info.annotation) else f"{path}.")
            else:
                out["mapped"].append(path)

    for kind, model in KINDS.items():
        walk(model, f"{kind}.")
    return out


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The document model inside a field's type (``list[PatchDoc]``, ``StrategyDoc | None``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in getattr(annotation, "__args__", ()):
        found = _nested_model(argument)
        if found is not None:
            return found
    return None
