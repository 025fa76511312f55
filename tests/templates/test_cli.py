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


def test_render_prints_the_objects() -> None:
    result = _template("render", "-f", str(TEMPLATES / "valid" / "cluster.yaml"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == (TEMPLATES / "valid" / "cluster.rendered.yaml").read_text()


def test_render_refuses_an_invalid_template() -> None:
    result = _template("render", "-f", str(TEMPLATES / "invalid" / "patch-outside.yaml"))
    assert result.returncode == 1 and result.stdout == ""
    assert "patches[0].file: '../outside-patch.yaml' is outside the template's folder" in result.stderr
