"""What sync would change, offline: the template's part of live objects compared with what it renders
(everything else on them kept), creates and deletes in dependency order, names of other clusters and of
controllers refused, and an export that renders back to exactly the live objects."""

from __future__ import annotations

from pathlib import Path

import pytest

from herder.resources import Resource
from herder.templates import check_file
from herder.templates.export import Unexportable, export_template
from herder.templates.plan import merged, plan, template_objects
from herder.templates.template import parse_template
from herder.templates.validation import validate
from tests.data.templates import TEMPLATES

VALID = TEMPLATES / "valid" / "cluster.yaml"


def _desired(path: Path = VALID) -> list[Resource]:
    return check_file(path).objects()


def _live(objects: list[Resource]) -> list[Resource]:
    """The objects as the server keeps them: with a uid, a version, finalizers, status and what kubectl and
    herder's controllers add to them."""
    out = []
    for i, obj in enumerate(objects):
        live = obj.clone()
        live.metadata.uid = f"uid-{i}"
        live.metadata.resource_version = str(100 + i)
        live.metadata.finalizers = ["herder.dev/cluster"]
        live.metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"] = "{}"
        live.status = {"phase": "Running"}
        out.append(live)
    return out


def _patch(name: str, labels: dict[str, str], annotations: dict[str, str] | None = None) -> Resource:
    return Resource.model_validate(
        {
            "apiVersion": "herder.dev/v1alpha1",
            "kind": "ConfigPatch",
            "metadata": {
                "name": name,
                "namespace": "default",
                "labels": labels,
                "annotations": annotations or {},
            },
            "spec": {"data": "machine: {}\n", "description": ""},
        }
    )


def test_live_objects_equal_to_the_template_are_in_sync() -> None:
    desired = _desired()
    assert plan("prod", desired, template_objects("prod", _live(desired))).in_sync


def test_a_change_updates_only_what_the_template_owns(tmp_path: Path) -> None:
    live = _live(_desired())
    changed = tmp_path / "cluster.yaml"
    (tmp_path / "patches").mkdir()
    for patch in (VALID.parent / "patches").iterdir():
        (tmp_path / "patches" / patch.name).write_text(patch.read_text())
    changed.write_text(
        VALID.read_text().replace("  size: 2", "  size: 3").replace("team: platform", "team: infra")
    )
    result = plan("prod", _desired(changed), template_objects("prod", live))
    assert [(c.action, c.kind, c.name) for c in result.changes] == [
        ("update", "Cluster", "prod"),
        ("update", "MachineSet", "prod-workers"),
    ]
    cluster, workers = (c.write for c in result.changes)
    assert cluster is not None and workers is not None
    assert cluster.metadata.labels == {"team": "infra"}
    assert workers.spec is not None and workers.spec["machineClass"]["size"] == 3
    # What the template does not own stays as it is.
    assert workers.metadata.finalizers == ["herder.dev/cluster"] and workers.status == {"phase": "Running"}
    assert workers.metadata.resource_version is not None
    assert workers.metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"] == "{}"
    diff = result.changes[1].diff()
    assert "--- live/MachineSet/prod-workers\n+++ template/MachineSet/prod-workers\n" in diff
    assert "-    size: 2\n+    size: 3\n" in diff


def test_creates_and_deletes_go_in_dependency_order() -> None:
    desired = _desired()
    keep = [o for o in desired if o.kind == "Cluster"]
    stale = [
        _patch("200-prod-old", {"herder.dev/cluster": "prod"}),
        Resource.model_validate(
            {
                "apiVersion": "herder.dev/v1alpha1",
                "kind": "MachineSet",
                "metadata": {
                    "name": "prod-old",
                    "namespace": "default",
                    "labels": {"herder.dev/cluster": "prod"},
                },
                "spec": {"role": "worker", "machines": []},
            }
        ),
    ]
    result = plan("prod", desired, template_objects("prod", _live(keep) + stale))
    # Patches before sets, so that a machine's first config has them; sets go before patches.
    assert [(c.action, c.kind) for c in result.changes] == [
        *[("create", "ConfigPatch")] * 5,
        *[("create", "MachineSet")] * 3,
        ("delete", "MachineSet"),
        ("delete", "ConfigPatch"),
    ]
    assert [(c.kind, c.name) for c in result.deletes] == [
        ("MachineSet", "prod-old"),
        ("ConfigPatch", "200-prod-old"),
    ]
    # Nodes are made by the sets' allocation: the template only waits to give them their state.
    assert {n.name for n in result.pending_nodes} == {
        "0a1b2c3d-0000-4000-8000-000000000001",
        "0a1b2c3d-0000-4000-8000-000000000005",
    }
    assert result.deletes[0].diff().endswith("-spec:\n-  role: worker\n-  machines: []\n")


def test_what_is_not_the_templates_is_left_alone() -> None:
    desired = _desired()
    controllers = _patch(
        "000-prod-system", {"herder.dev/cluster": "prod"}, {"herder.dev/controller": "ManagedControlPlane"}
    )
    machines = _patch(
        "100-tuning",
        {"herder.dev/cluster": "prod", "herder.dev/machine": "0a1b2c3d-0000-4000-8000-000000000001"},
    )
    other = _patch("200-other-ntp", {"herder.dev/cluster": "other"})
    owned = template_objects("prod", [*_live(desired), controllers, machines, other])
    assert {o.name for o in owned}.isdisjoint({"000-prod-system", "100-tuning", "200-other-ntp"})
    assert plan("prod", desired, owned).in_sync


def test_a_name_taken_by_another_cluster_or_a_controller_is_a_conflict() -> None:
    desired = _desired()
    live = template_objects("prod", _live(desired))
    theirs = _patch("201-prod-ntp", {"herder.dev/cluster": "other"})
    controller = _patch(
        "500-gpu-kernel-modules", {"herder.dev/cluster": "prod"}, {"herder.dev/controller": "X"}
    )
    loose = _patch("200-prod-patches-registry-mirrors.yaml", {})
    kept = [o for o in live if o.name not in {theirs.name, controller.name, loose.name}]
    result = plan("prod", desired, kept, [theirs, controller, loose])
    assert result.conflicts == [
        "ConfigPatch 201-prod-ntp belongs to cluster other: the template of cluster prod may not change it",
        "ConfigPatch 500-gpu-kernel-modules is managed by controller X: the template of cluster prod may not change it",
        "ConfigPatch 200-prod-patches-registry-mirrors.yaml exists and is not an object of cluster prod: rename it in "
        "the template, or delete it",
    ]
    assert not any(c.name in {theirs.name, controller.name, loose.name} for c in result.changes)


def test_a_nodes_allocation_labels_are_kept_and_its_state_set() -> None:
    desired = next(o for o in _desired() if o.name == "0a1b2c3d-0000-4000-8000-000000000005")
    node = desired.clone()
    node.spec = {"locked": False, "installDisk": ""}
    node.metadata.labels = {k: v for k, v in node.metadata.labels.items() if k.startswith("herder.dev/")}
    node.metadata.labels["herder.dev/role"] = "worker"
    node.metadata.annotations = {"herder.dev/allocated-by": "x"}
    write = merged(node, desired)
    assert write.spec == {"locked": True, "installDisk": ""}
    assert write.metadata.labels == {**node.metadata.labels, "rack": "r7"}
    assert write.metadata.annotations == {
        "herder.dev/allocated-by": "x",
        "herder.dev/managed-by": "cluster-templates",
    }


def test_an_export_renders_back_to_the_live_objects() -> None:
    live = _live(_desired())
    cluster = next(o for o in live if o.kind == "Cluster")
    text = export_template(cluster, [o for o in live if o is not cluster])
    template, problems = parse_template(text, Path("exported.yaml"))
    again = validate(template, problems)
    assert problems.errors == []
    assert plan("prod", again, template_objects("prod", live)).in_sync
    assert "idOverride: 201-prod-ntp" in text and "name: ntp" in text
    assert (
        "kind: Machine\nname: 0a1b2c3d-0000-4000-8000-000000000005\nlabels:\n  rack: r7\nlocked: true\n"
        in text
    )
    assert "systemExtensions:\n  - siderolabs/iscsi-tools" in text  # the cluster's extensions round-trip
    assert "enableWorkloadProxy" not in text  # what herder ignored is not there to export


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        (
            {
                "kind": "MachineSet",
                "name": "gpu-pool",
                "labels": {"herder.dev/cluster": "prod"},
                "spec": {"role": "worker", "machines": []},
            },
            "MachineSet gpu-pool: a template names a worker set prod-NAME",
        ),
        (
            {
                "kind": "MachineSet",
                "name": "prod-byhand",
                "labels": {"herder.dev/cluster": "prod"},
                "spec": {"role": "worker"},
            },
            "MachineSet prod-byhand: its machines were bound by hand",
        ),
        (
            {
                "kind": "ConfigPatch",
                "name": "400-prod-class-machine",
                "labels": {
                    "herder.dev/cluster": "prod",
                    "herder.dev/cluster-machine": "0a1b2c3d-0000-4000-8000-0000000000aa",
                },
                "spec": {"data": "machine: {}\n"},
            },
            "machine 0a1b2c3d-0000-4000-8000-0000000000aa is in no set of cluster prod that lists its machines",
        ),
    ],
)
def test_what_a_template_cannot_say_is_not_exported(extra: dict[str, object], reason: str) -> None:
    live = _live(_desired())
    obj = Resource.model_validate(
        {
            "apiVersion": "herder.dev/v1alpha1",
            "kind": extra["kind"],
            "metadata": {"name": extra["name"], "namespace": "default", "labels": extra["labels"]},
            "spec": extra["spec"],
        }
    )
    cluster = next(o for o in live if o.kind == "Cluster")
    with pytest.raises(Unexportable) as refused:
        export_template(cluster, [*live, obj])
    assert any(reason in p for p in refused.value.problems), refused.value.problems


def test_a_machine_moving_to_another_set_gets_its_state_once_it_is_there() -> None:
    desired = _desired()
    live = _live(desired)
    node = next(o for o in live if o.name == "0a1b2c3d-0000-4000-8000-000000000005")
    node.metadata.labels["herder.dev/machine-set"] = "prod-control-planes"  # still bound to its old set
    node.spec = {"locked": False, "installDisk": ""}
    result = plan("prod", desired, template_objects("prod", live))
    assert [n.name for n in result.pending_nodes] == ["0a1b2c3d-0000-4000-8000-000000000005"]
    assert not any(c.kind == "MachineSetNode" for c in result.changes)


def test_the_template_owns_the_clusters_lock(tmp_path: Path) -> None:
    """``locked: true`` locks the cluster (``herder.dev/locked``); a template without it unlocks it on sync;
    a locked cluster exports as ``locked: true`` and renders back to itself."""
    (tmp_path / "patches").mkdir()
    for patch in (VALID.parent / "patches").iterdir():
        (tmp_path / "patches" / patch.name).write_text(patch.read_text())
    locked = tmp_path / "cluster.yaml"
    text = VALID.read_text()
    assert "\nkind: Cluster\n" in text
    locked.write_text(text.replace("\nkind: Cluster\n", "\nkind: Cluster\nlocked: true\n", 1))
    unlocked_live = _live(_desired())
    result = plan("prod", _desired(locked), template_objects("prod", unlocked_live))
    assert [(c.action, c.kind) for c in result.changes] == [("update", "Cluster")]
    write = result.changes[0].write
    assert write is not None and write.metadata.annotations["herder.dev/locked"] == "true"
    assert "+    herder.dev/locked: 'true'\n" in result.changes[0].diff()

    locked_live = _live(_desired(locked))
    unlock = plan("prod", _desired(), template_objects("prod", locked_live))
    assert [(c.action, c.kind) for c in unlock.changes] == [("update", "Cluster")]
    write = unlock.changes[0].write
    assert write is not None and "herder.dev/locked" not in write.metadata.annotations
    # Other herder.dev/ annotations stay as they are.
    assert write.metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"] == "{}"

    cluster = next(o for o in locked_live if o.kind == "Cluster")
    exported = export_template(cluster, [o for o in locked_live if o is not cluster])
    assert "\nlocked: true\n" in exported.split("---")[0] + "\n" and "herder.dev/locked" not in exported
    template, problems = parse_template(exported, Path("exported.yaml"))
    assert plan("prod", validate(template, problems), template_objects("prod", locked_live)).in_sync
