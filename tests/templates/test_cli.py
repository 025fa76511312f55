"""``herder cluster template validate`` and ``render`` as a user runs them, offline: exit codes, one line
per error or warning on stderr, the objects as YAML on stdout."""

from __future__ import annotations

import subprocess

from tests.api.server import HERDER
from tests.data.templates import TEMPLATES


def _template(*args: str) -> subprocess.CompletedProcess[str]:
    # No server exists: --kubeconfig names a file that does not either, and nothing reads it.
    return subprocess.run(
        [HERDER, "cluster", "template", *args, "--kubeconfig", "/nonexistent/kubeconfig"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_validate_a_valid_template() -> None:
    path = TEMPLATES / "valid" / "cluster.yaml"
    result = _template("validate", "-f", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{path}: valid: cluster prod, 14 objects\n"
    assert result.stderr.splitlines() == [
        f'warning: {path}: Cluster "prod" (document 1): features.enableWorkloadProxy: has no counterpart in '
        "herder; ignored",
    ]


def test_validate_prints_every_error_and_exits_1() -> None:
    path = TEMPLATES / "invalid" / "many-errors.yaml"
    result = _template("validate", "-f", str(path))
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 12 and all(line.startswith(f"error: {path}: ") for line in lines)
    assert f'error: {path}: Workers "gpu" (document 3): patches[2].file: cannot read' in result.stderr


def test_validate_prints_every_error_of_every_document_in_one_run() -> None:
    path = TEMPLATES / "invalid" / "every-error-at-once.yaml"
    result = _template("validate", "-f", str(path))
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    # error: FILE: DOCUMENT: FIELD: REASON, one per line
    fields = [line.split(": ", 4) for line in lines]
    assert all(f[0] == "error" and f[1] == str(path) and len(f) == 5 for f in fields), result.stderr
    assert [(f[2], f[3]) for f in fields] == [
        ('Cluster "Prod_EU" (document 1)', "name"),
        ('Cluster "Prod_EU" (document 1)', "patches[0].file"),
        ('Cluster "Prod_EU" (document 1)', "patches[1]"),
        ('Cluster "Prod_EU" (document 1)', "kubernetes.version"),
        ("ControlPlane (document 2)", "name"),
        ("ControlPlane (document 2)", "patches[0]"),
        ('Workers "gpu" (document 3)', "patches[0]"),
    ]


def test_render_prints_the_objects() -> None:
    result = _template("render", "-f", str(TEMPLATES / "valid" / "cluster.yaml"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == (TEMPLATES / "valid" / "cluster.rendered.yaml").read_text()


def test_render_refuses_an_invalid_template() -> None:
    result = _template("render", "-f", str(TEMPLATES / "invalid" / "patch-outside.yaml"))
    assert result.returncode == 1 and result.stdout == ""
    assert "patches[0].file: '../outside-patch.yaml' is outside the template's folder" in result.stderr
