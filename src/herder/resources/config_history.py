"""MachineConfigHistory: every config herder applied to one machine, as a diff from the one before.

One per machine (named by its UUID, labelled with its cluster, so that per-cluster roles govern it), written
by herder only: each apply appends an entry (the unified diff of the config, secrets redacted, from the
previous one), the newest ``MAX_ENTRIES`` are kept and none older than ``MAX_AGE_SECONDS``. ``current`` is
the last applied config, redacted, which the next diff is taken from. A machine that moves to another
cluster starts a new history: one cluster's operators never read another's configs.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from herder.resources.configuration import GROUP, VERSION
from herder.resources.machines import CLUSTER_LABEL
from herder.resources.registry import KindInfo, PrinterColumn, label_path

_STRICT = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

MAX_ENTRIES = 100
MAX_AGE_SECONDS = 30 * 24 * 3600
# What a redacted secret reads as (Talos's own mark in ``talosctl get machineconfig``).
REDACTED = "******"


class ConfigHistoryEntry(BaseModel):
    model_config = _STRICT

    revision: int = Field(ge=1, description="1 for the first config applied, counting up")
    applied_at: str = Field(alias="appliedAt")
    hash: str = Field(description="SHA-256 of the whole config applied")
    talos_version: str = Field(default="", alias="talosVersion")
    mode: str = Field(default="", description="how it was applied: maintenance, no reboot, reboot, …")
    added: int = Field(default=0, description="lines added")
    removed: int = Field(default=0, description="lines removed")
    diff: str = Field(default="", description="unified diff from the previous config, secrets redacted")


class MachineConfigHistorySpec(BaseModel):
    model_config = _STRICT

    cluster: str = ""
    current: str = Field(default="", description="the config last applied, secrets redacted")
    entries: list[ConfigHistoryEntry] = Field(default_factory=list, description="oldest first")


def _entries(obj: dict[str, Any]) -> list[Any]:
    return list((obj.get("spec") or {}).get("entries") or [])


def _newest(obj: dict[str, Any]) -> str:
    entries = _entries(obj)
    return str(entries[-1].get("appliedAt", "")) if entries else ""


MACHINE_CONFIG_HISTORY = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="MachineConfigHistory",
    plural="machineconfighistories",
    spec_model=MachineConfigHistorySpec,
    categories=("herder",),
    printer_columns=(
        PrinterColumn("Cluster", label_path(CLUSTER_LABEL)),
        PrinterColumn("Entries", ".spec.entries", compute=lambda obj: str(len(_entries(obj)))),
        PrinterColumn("Last-Applied", ".spec.entries", compute=_newest),
    ),
    description="Every config herder applied to one machine, as diffs with secrets redacted (Operator and up).",
)
