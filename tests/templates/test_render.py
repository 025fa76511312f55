"""``render`` offline: a template becomes herder's objects as Omni translates one into its resources,
compared with a golden file, and named so that sync can find them again."""

from __future__ import annotations

from pathlib import Path

from herder.resources.clusters import MACHINE_SET_NODE
from herder.templates import check_file
from herder.templates.documents import PatchDoc
from herder.templates.render import patch_id
from herder.templates.yaml_text import dump_all
from tests.data.templates import TEMPLATES

VALID = TEMPLATES / "valid"


def test_the_valid_template_renders_as_its_golden_file() -> None:
    resources = check_file(VALID / "cluster.yaml").objects()
    rendered = dump_all(r.to_dict() for r in resources)
    assert rendered == (VALID / "cluster.rendered.yaml").read_text()


def test_what_each_document_becomes() -> None:
    by_name = {(r.kind, r.name): r for r in check_file(VALID / "cluster.yaml").objects()}
    cluster = by_name["Cluster", "prod"]
    assert cluster.spec == {
        "talosVersion": "v1.13.9",
        "kubernetesVersion": "1.33.2",
        "endpoint": "",
        "features": {"diskEncryption": True, "kubeSpan": True},
        "backups": {"interval": "1h", "retention": 24, "store": "default"},
        "systemExtensions": ["siderolabs/iscsi-tools"],
    }
    assert cluster.metadata.labels == {"team": "platform"}
    control_planes = by_name["MachineSet", "prod-control-planes"]
    assert control_planes.spec is not None and control_planes.spec["role"] == "controlplane"
    workers = by_name["MachineSet", "prod-workers"]
    assert workers.spec is not None
    assert workers.spec["machineClass"] == {"name": "general", "size": 2}
    assert workers.spec["updateStrategy"] == {"type": "Rolling", "rolling": {"maxParallelism": 2}}
    # Omni's default type of a strategy without one: Rolling, but Unset for deletes.
    assert workers.spec["deleteStrategy"]["type"] == "Rolling"
    gpu = by_name["MachineSet", "prod-gpu"]
    assert gpu.spec is not None and gpu.spec["upgradeStrategy"]["type"] == "Unset"
    assert gpu.metadata.labels == {"herder.dev/cluster": "prod", "accelerator": "nvidia"}
    # Listed machines are nodes of their set; their Machine documents give lock, disk and labels.
    locked = by_name["MachineSetNode", "0a1b2c3d-0000-4000-8000-000000000005"]
    assert locked.spec == {"locked": True, "installDisk": ""}
    assert locked.metadata.labels["rack"] == "r7"
    assert locked.metadata.labels["herder.dev/machine-set"] == "prod-gpu"
    disk = by_name["MachineSetNode", "0a1b2c3d-0000-4000-8000-000000000001"]
    assert disk.spec == {"locked": False, "installDisk": "/dev/nvme0n1"}
    assert not any(
        r.kind == MACHINE_SET_NODE.kind and r.metadata.labels.get("herder.dev/machine-set") == "prod-workers"
        for r in by_name.values()
    )
    # Patches are labelled for their layer and named as Omni names them.
    layers = {name: r.metadata.labels for (kind, name), r in by_name.items() if kind == "ConfigPatch"}
    assert layers == {
        "200-prod-patches-registry-mirrors.yaml": {"herder.dev/cluster": "prod"},
        "201-prod-ntp": {"herder.dev/cluster": "prod", "purpose": "time"},
        "400-prod-control-planes-patches-control-plane.yaml": {
            "herder.dev/cluster": "prod",
            "herder.dev/machine-set": "prod-control-planes",
        },
        "500-gpu-kernel-modules": {"herder.dev/cluster": "prod", "herder.dev/machine-set": "prod-gpu"},
        "400-prod-0a1b2c3d-0000-4000-8000-000000000001-address": {
            "herder.dev/cluster": "prod",
            "herder.dev/cluster-machine": "0a1b2c3d-0000-4000-8000-000000000001",
        },
    }
    mirrors = by_name["ConfigPatch", "200-prod-patches-registry-mirrors.yaml"]
    assert mirrors.spec == {
        "data": (VALID / "patches" / "registry-mirrors.yaml").read_text(),
        "description": "patches/registry-mirrors.yaml",
    }
    assert all(
        r.metadata.annotations["herder.dev/managed-by"] == "cluster-templates" for r in by_name.values()
    )


def test_patch_names_are_valid_object_names() -> None:
    assert (
        patch_id(200, "alpha", PatchDoc(file="../Patches/My Mirrors.yaml"))
        == "200-alpha-patches-my-mirrors.yaml"
    )
    assert patch_id(401, "alpha-workers", PatchDoc(name="kubespan")) == "401-alpha-workers-kubespan"
    assert (
        patch_id(400, "alpha", PatchDoc.model_validate({"name": "x", "idOverride": "999-mine"})) == "999-mine"
    )


def test_an_invalid_template_renders_nothing(tmp_path: Path) -> None:
    checked = check_file(TEMPLATES / "invalid" / "locked-control-plane.yaml")
    try:
        checked.objects()
    except ValueError as exc:
        assert "a control plane machine cannot be locked" in str(exc)
    else:
        raise AssertionError("an invalid template rendered")
