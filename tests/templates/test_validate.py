"""``validate`` offline: every kind of mistake in a template is an error naming the file, the document
(kind and name), the field and the reason, all of them at once; fields herder has no counterpart for are
warnings, never dropped silently."""

from __future__ import annotations

from pathlib import Path

import pytest

from herder.templates import Problem, check_file
from herder.templates.documents import field_catalogue
from tests.data.templates import TEMPLATES

INVALID = TEMPLATES / "invalid"


def _errors(name: str) -> list[Problem]:
    checked = check_file(INVALID / name)
    assert checked.problems.errors, f"{name} should be invalid"
    return checked.problems.errors


def _has(errors: list[Problem], document: str, field: str, reason: str) -> None:
    assert any(e.document == document and e.field == field and reason in e.message for e in errors), (
        f"no error {document}: {field}: {reason!r} among:\n" + "\n".join(str(e) for e in errors)
    )


def _exactly(errors: list[Problem], expected: list[tuple[str, str, str]]) -> None:
    """Each expected error (document, field, reason) is there, and no other."""
    for document, field, reason in expected:
        _has(errors, document, field, reason)
    assert len(errors) == len(expected), "\n".join(str(e) for e in errors)


def test_a_valid_template_has_no_errors_and_warns_of_what_herder_ignores() -> None:
    checked = check_file(TEMPLATES / "valid" / "cluster.yaml")
    assert checked.problems.errors == []
    warnings = {(w.document, w.field): w.message for w in checked.problems.warnings}
    cluster = 'Cluster "prod" (document 1)'
    assert warnings == {
        (cluster, "features.enableWorkloadProxy"): "has no counterpart in herder; ignored",
    }
    assert checked.cluster_name == "prod"


@pytest.mark.parametrize(
    ("name", "document", "field", "reason"),
    [
        ("unknown-field.yaml", 'Cluster "alpha" (document 1)', "features.diskEncryptoin", "unknown field"),
        (
            "bad-version.yaml",
            'Cluster "alpha" (document 1)',
            "talos.version",
            "unsupported Talos version 'v1.7.0': supported contracts are 1.9",
        ),
        (
            "patch-outside.yaml",
            'Cluster "alpha" (document 1)',
            "patches[0].file",
            "'../outside-patch.yaml' is outside the template's folder",
        ),
        (
            "forbidden-patch.yaml",
            "ControlPlane (document 2)",
            "patches[0]",
            "config patch 'patches/forbidden.yaml' may not change cluster.clusterName",
        ),
        (
            "forbidden-patch.yaml",
            "ControlPlane (document 2)",
            "patches[1]",
            "config patch 'install-disk' may not change machine.install.disk",
        ),
        (
            "invalid-config.yaml",
            'Machine "0a1b2c3d-0000-4000-8000-000000000001" (document 3)',
            "patches[0]",
            "makes an invalid config for Talos 1.13: HostnameConfig: conflicts with .machine.network.hostname",
        ),
        (
            "machine-in-two-sets.yaml",
            'Workers "workers" (document 3)',
            "machines[0]",
            "machine 0a1b2c3d-0000-4000-8000-000000000002 is also in ControlPlane (document 2)",
        ),
        (
            "locked-control-plane.yaml",
            'Machine "0a1b2c3d-0000-4000-8000-000000000001" (document 3)',
            "locked",
            "a control plane machine cannot be locked",
        ),
        ("duplicate-key.yaml", "", "", "invalid YAML: found duplicate key 'name' at line 3"),
    ],
)
def test_each_mistake_is_an_error_naming_document_field_and_reason(
    name: str, document: str, field: str, reason: str
) -> None:
    errors = _errors(name)
    _has(errors, document, field, reason)
    assert all(e.file == str(INVALID / name) for e in errors)


def test_a_kubernetes_version_outside_the_talos_window_is_refused_offline(tmp_path: Path) -> None:
    text = (INVALID / "bad-version.yaml").read_text().replace("v1.7.0", "v1.13.9")
    (tmp_path / "t.yaml").write_text(text)
    errors = check_file(tmp_path / "t.yaml").problems.errors
    assert [(e.field, e.message) for e in errors] == [
        (
            "kubernetes.version",
            "Kubernetes 1.20.0 is not supported by Talos 1.13.9 (it supports Kubernetes 1.31 to 1.36)",
        )
    ]


def test_omnis_whole_template_rules() -> None:
    errors = _errors("structure.yaml")
    _has(errors, "", "", "a template has exactly one Cluster document, found 2")
    _has(errors, "", "", "a template has exactly one ControlPlane document, found 0")
    _has(errors, 'Workers "workers" (document 3)', "name", 'another Workers document is named "workers"')
    _has(errors, 'Workers "workers" (document 4)', "name", 'another Workers document is named "workers"')
    _has(
        errors,
        'Machine "0a1b2c3d-0000-4000-8000-000000000009" (document 5)',
        "name",
        "is not used by the ControlPlane or any Workers",
    )
    _has(
        errors, "document 6 (line 27)", "kind", "unknown kind 'Nodes': expected one of Cluster, ControlPlane"
    )
    assert len(errors) == 6, "\n".join(str(e) for e in errors)


def test_fields_herder_refuses_say_why() -> None:
    errors = _errors("refused-fields.yaml")
    control_plane = "ControlPlane (document 2)"
    _has(errors, control_plane, "name", "custom name is not allowed in the controlplane")
    _has(errors, control_plane, "updateStrategy", "control planes are updated one at a time")
    _has(errors, 'Workers "workers" (document 3)', "bootstrapSpec", "bootstrapSpec is not allowed in workers")
    _has(
        errors,
        'Machine "0a1b2c3d-0000-4000-8000-000000000002" (document 4)',
        "install.diskSelector",
        "name the install disk with install.disk",
    )


def test_every_error_is_reported_at_once_in_document_order() -> None:
    errors = _errors("many-errors.yaml")
    cluster, control_plane, gpu = (
        'Cluster "Alpha_Cluster" (document 1)',
        "ControlPlane (document 2)",
        'Workers "gpu" (document 3)',
    )
    expected = [
        (cluster, "name", "invalid cluster name 'Alpha_Cluster'"),
        (cluster, "kubernetes.version", "Input should be a valid string"),
        (cluster, "talos.version", "it starts with v"),
        (cluster, "features.diskEncryption", "Input should be a valid boolean"),
        (control_plane, "machines[0]", "invalid machine ID 'not-a-uuid'"),
        (control_plane, "machineClass", "machines and machineClass are mutually exclusive"),
        (gpu, "machineClass.size", "invalid size 'lots': a number of machines, or unlimited"),
        (gpu, "updateStrategy.type", "Input should be 'Rolling' or 'Unset'"),
        (gpu, "patches[0]", "file and inline are mutually exclusive"),
        (gpu, "patches[1]", "an inline patch needs a name or an idOverride"),
        (gpu, "patches[2].file", "cannot read 'patches/missing.yaml'"),
        (gpu, "updateStrategy.rolling.maxParallelism", "greater than or equal to 1"),
    ]
    _exactly(errors, expected)
    positions = [e.position for e in errors]
    assert positions == sorted(positions)
    assert str(errors[0]).startswith(f"{INVALID / 'many-errors.yaml'}: {cluster}: name: invalid cluster name")


def test_one_run_reports_what_a_broken_cluster_document_would_hide() -> None:
    """An invalid cluster name and a refused field do not hide the versions, the patch files, the unnamed
    inline patch and the patch contents (checked against the Talos contract even though the Kubernetes
    version is invalid), as omnictl cluster template validate reports them all."""
    errors = _errors("every-error-at-once.yaml")
    cluster, control_plane, gpu = (
        'Cluster "Prod_EU" (document 1)',
        "ControlPlane (document 2)",
        'Workers "gpu" (document 3)',
    )
    expected = [
        (cluster, "name", "invalid cluster name 'Prod_EU'"),
        (cluster, "kubernetes.version", "invalid Kubernetes version 'v1.33.x': expected X.Y.Z, e.g. 1.33.0"),
        (cluster, "patches[0].file", "cannot read 'patches/nowhere.yaml'"),
        (cluster, "patches[1]", "an inline patch needs a name or an idOverride"),
        (control_plane, "name", "custom name is not allowed in the controlplane"),
        (control_plane, "patches[0]", "makes an invalid config for Talos 1.13: HostnameConfig: conflicts"),
        (gpu, "patches[0]", "config patch 'disk' may not change machine.install.disk"),
    ]
    _exactly(errors, expected)


def test_an_invalid_talos_version_still_has_the_patches_checked() -> None:
    errors = _errors("bad-talos-version.yaml")
    cluster = 'Cluster "beta" (document 1)'
    _has(errors, cluster, "talos.version", "invalid Talos version '1.13.9': it starts with v")
    _has(errors, cluster, "patches[0]", "config patch 'disk' may not change machine.install.disk")
    assert len(errors) == 2, "\n".join(str(e) for e in errors)


def test_a_missing_file_is_one_error(tmp_path: Path) -> None:
    errors = check_file(tmp_path / "nope.yaml").problems.errors
    assert [e.message for e in errors] == ["cannot read the template: No such file or directory"]


def test_the_field_catalogue_names_what_is_mapped_ignored_and_refused() -> None:
    catalogue = field_catalogue()
    assert "Cluster.talos.version" in catalogue["mapped"]
    assert "Cluster.features.kubeSpan" in catalogue["mapped"]
    assert "Machine.install.disk" in catalogue["mapped"]
    assert "Workers.patches[].inline" in catalogue["mapped"]
    assert "Cluster.kubernetes.manifests[].inline" in catalogue["mapped"]
    assert "Cluster.features.backupConfiguration.interval" in catalogue["mapped"]
    assert "ControlPlane.bootstrapSpec.clusterUUID" in catalogue["mapped"]
    assert "ControlPlane.managed.enabled" in catalogue["mapped"]
    assert "Machine.install.diskSelector" in catalogue["refused"]
