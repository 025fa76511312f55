"""Kinds that shape Talos machine configuration: ConfigPatch."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from herder.resources.registry import KindInfo, PrinterColumn

GROUP = "herder.dev"
VERSION = "v1alpha1"


class ConfigPatchSpec(BaseModel):
    """A Talos config patch (strategic merge or JSON 6902), targeted by its labels."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

    data: str = Field(min_length=1, description="the patch document(s), YAML")
    description: str = ""

    @field_validator("data")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value


CONFIG_PATCH = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="ConfigPatch",
    plural="configpatches",
    spec_model=ConfigPatchSpec,
    short_names=("cp",),
    categories=("herder",),
    printer_columns=(
        PrinterColumn("Cluster", ".metadata.labels.herder\\.dev/cluster"),
        PrinterColumn("Description", ".spec.description", priority=1),
    ),
    description="A Talos machine config patch applied to the machines its labels select.",
)
