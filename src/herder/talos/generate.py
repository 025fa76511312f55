"""Machine config generation: the ``controlplane`` and ``worker`` configs Talos's own generator would write
for a version contract, and what ``talosctl gen config`` writes (configs with patches, plus a talosconfig).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from herder.talos.documents import dump_documents
from herder.talos.generate_documents import typed_documents
from herder.talos.generate_input import ConfigInput, GenerateError, MachineType
from herder.talos.generate_v1alpha1 import v1alpha1_document
from herder.talos.patches import load_patches, patch_documents
from herder.talos.talosconfig import Talosconfig, generate_talosconfig

__all__ = [
    "ConfigInput",
    "GenerateError",
    "GeneratedBundle",
    "MachineType",
    "generate_bundle",
    "generate_config",
    "generate_documents",
]


def generate_documents(inp: ConfigInput, machine_type: MachineType) -> list[dict[str, Any]]:
    """The documents of one machine config: the v1alpha1 document first, then the typed ones."""
    return [v1alpha1_document(inp, machine_type), *typed_documents(inp, machine_type)]


def generate_config(inp: ConfigInput, machine_type: MachineType) -> str:
    """One machine config as a YAML stream, unpatched."""
    return dump_documents(generate_documents(inp, machine_type))


@dataclass(frozen=True)
class GeneratedBundle:
    controlplane: str
    worker: str
    talosconfig: Talosconfig


def generate_bundle(
    inp: ConfigInput,
    *,
    patches: Sequence[str] = (),
    control_plane_patches: Sequence[str] = (),
    worker_patches: Sequence[str] = (),
    talos_endpoints: Sequence[str] = (),
) -> GeneratedBundle:
    """What ``talosctl gen config`` produces: both configs with the patches applied (the common ones first,
    then those of the machine type), and an ``os:admin`` talosconfig for the cluster.

    Patches are texts in any form Talos accepts (strategic merge, multi-document, JSON 6902); a malformed
    one raises ``herder.talos.patches.PatchError``.
    """
    common = load_patches(patches)
    per_type = {
        MachineType.CONTROLPLANE: load_patches(control_plane_patches),
        MachineType.WORKER: load_patches(worker_patches),
    }
    configs = {}
    for machine_type, specific in per_type.items():
        documents = generate_documents(inp, machine_type)
        # Talos applies the common patches and the machine type's in two passes, not as one list.
        for layer in (common, specific):
            documents = patch_documents(documents, layer)
        configs[machine_type] = dump_documents(documents)
    return GeneratedBundle(
        controlplane=configs[MachineType.CONTROLPLANE],
        worker=configs[MachineType.WORKER],
        talosconfig=generate_talosconfig(inp.secrets, inp.cluster_name, endpoints=talos_endpoints),
    )
