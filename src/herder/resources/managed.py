"""Managed control planes as users see them: a ManagedControlPlaneOffering per infra provider whose
``spec.managedControlPlanes`` offers them, written by herder only.

The offering is a public, read-only projection of the platform's configuration: the size names with
their machine counts and the Talos versions allowed, and nothing else (no provider data, no provider
id: the provider is usually hidden). It is named as the provider without herder's reserved prefix
(``herder-emu`` offers ``emu``), and that name is what a cluster's ``spec.controlPlane.managed.provider``
and a template's ``managed.provider`` say.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from herder.resources.access import RESERVED_PREFIX
from herder.resources.configuration import GROUP, VERSION
from herder.resources.registry import KindInfo, PrinterColumn

_STRICT = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)


def offering_name(provider_id: str) -> str:
    """The offering of a provider: its id, less herder's reserved prefix (a hidden provider's names
    are reserved; the offering is the name users may know)."""
    return provider_id.removeprefix(RESERVED_PREFIX)


class OfferedSize(BaseModel):
    model_config = _STRICT

    name: str
    machines: int


class OfferingSpec(BaseModel):
    model_config = _STRICT

    sizes: list[OfferedSize] = []
    talos_versions: list[str] = Field(default_factory=list, alias="talosVersions")


def _sizes(obj: dict[str, Any]) -> str:
    sizes = (obj.get("spec") or {}).get("sizes") or []
    return ",".join(f"{s.get('name')}({s.get('machines')})" for s in sizes)


def _versions(obj: dict[str, Any]) -> str:
    return ",".join((obj.get("spec") or {}).get("talosVersions") or [])


MANAGED_CONTROL_PLANE_OFFERING = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="ManagedControlPlaneOffering",
    plural="managedcontrolplaneofferings",
    namespaced=False,
    spec_model=OfferingSpec,
    short_names=("mcpo",),
    categories=("herder",),
    printer_columns=(
        PrinterColumn("Sizes", ".spec.sizes", compute=_sizes),
        PrinterColumn("Talos", ".spec.talosVersions", compute=_versions),
    ),
    description="Managed control planes the platform offers: size names, machine counts, Talos versions.",
)


def control_plane_request_set_name(cluster: str) -> str:
    """The hidden MachineRequestSet of a managed cluster's control planes (a reserved name)."""
    return f"{RESERVED_PREFIX}{cluster}-control-planes"


def system_patch_name(cluster: str, what: str) -> str:
    """A hidden system ConfigPatch of a managed cluster (a reserved name)."""
    return f"{RESERVED_PREFIX}{cluster}-{what}"
