"""Core ``v1`` kinds, served so that Kubernetes clients feel at home (Namespace)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from herder.resources.registry import KindInfo, PrinterColumn


class NamespaceSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    finalizers: list[str] = []


class NamespaceStatus(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    phase: str = "Active"


NAMESPACE = KindInfo(
    group="",
    version="v1",
    kind="Namespace",
    plural="namespaces",
    namespaced=False,
    spec_model=NamespaceSpec,
    status_model=NamespaceStatus,
    short_names=("ns",),
    initial_status={"phase": "Active"},
    printer_columns=(PrinterColumn("Status", ".status.phase"),),
    description="A scope for names; the future unit of tenancy.",
)
