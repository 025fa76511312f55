"""Templates of managed control planes, offline: ``ControlPlane.managed`` becomes the Cluster's
``spec.controlPlane.managed`` and no control plane set (the platform makes it); what would be the
platform's (machines, their patches) and an incomplete ``managed`` are errors naming the field."""

from __future__ import annotations

from herder.templates import check_file
from herder.templates.export import export_template
from tests.data.templates import TEMPLATES


def test_a_managed_control_plane_maps_onto_the_cluster() -> None:
    checked = check_file(TEMPLATES / "valid" / "managed.yaml")
    assert checked.problems.errors == []
    by_name = {(r.kind, r.name): r for r in checked.objects()}
    cluster = by_name["Cluster", "hosted"]
    assert (cluster.spec or {})["controlPlane"] == {
        "managed": {"enabled": True, "provider": "emu", "size": "xs"}
    }
    assert ("MachineSet", "hosted-control-planes") not in by_name
    assert ("MachineSet", "hosted-workers") in by_name


def test_what_the_platform_owns_is_refused_with_the_field() -> None:
    errors = check_file(TEMPLATES / "invalid" / "managed-with-machines.yaml").problems.errors
    found = {(e.document.split(" ")[0], e.field): e.message for e in errors}
    assert "the platform's" in found["ControlPlane", "machines"]
    assert "the platform's" in found["ControlPlane", "patches"]
    assert any("size" in e.message and e.document.startswith("Cluster") for e in errors), errors


def test_a_managed_cluster_exports_its_managed_control_plane() -> None:
    objects = check_file(TEMPLATES / "valid" / "managed.yaml").objects()
    cluster = next(o for o in objects if o.kind == "Cluster")
    text = export_template(cluster, objects)
    assert "kind: ControlPlane\nmanaged:\n  enabled: true\n  provider: emu\n  size: xs\n" in text, text
