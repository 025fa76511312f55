"""``herder talos validate`` and ``herder talos patch`` as a user runs them: a real process, exit codes,
and one line on stderr for every bad input."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from herder.talos.documents import load_documents
from tests.data import TALOS

VECTORS = TALOS / "patches"
WORKER_1_12 = TALOS / "golden" / "v1.12" / "base-worker.yaml"
WORKER_1_11 = TALOS / "golden" / "v1.11" / "base-worker.yaml"


def _herder(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from herder.cli.main import main; main()", "talos", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
        check=False,
    )


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_validate_accepts_a_golden(tmp_path: Path) -> None:
    result = _herder("validate", str(WORKER_1_12), "--talos-version", "v1.12.3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{WORKER_1_12} is valid for Talos 1.12\n"


def test_validate_names_document_path_and_reason(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(WORKER_1_12.read_text().replace("    certSANs: []", "    certSANs: nope"))
    line = _one_error_line(_herder("validate", str(broken), "--talos-version", "1.12", cwd=tmp_path))
    assert (
        line
        == f"error: {broken}: invalid machine config: v1alpha1 machine.certSANs: expected array, got string"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["validate", str(WORKER_1_12), "--talos-version", "1.2"], "error: unsupported Talos version '1.2'"),
        (
            ["validate", "missing.yaml", "--talos-version", "1.12"],
            "error: cannot read missing.yaml: No such file",
        ),
        (
            ["patch", str(WORKER_1_11), "--patch", "machine: ["],
            "error: malformed patch: ",
        ),
        (
            ["patch", str(WORKER_1_11), "--patch", "@missing-patch.yaml"],
            "error: --patch: cannot read patch file 'missing-patch.yaml'",
        ),
        (
            [
                "patch",
                str(VECTORS / "multidoc" / "config.yaml"),
                "--patch",
                f"@{VECTORS / 'multidoc' / 'jsonpatch.yaml'}",
            ],
            "error: JSON6902 patches are not supported for multi-document machine configuration",
        ),
        (
            [
                "patch",
                str(WORKER_1_11),
                "--user",
                "--patch",
                "cluster: {controlPlane: {endpoint: https://x:6443}}",
            ],
            "error: config patch \"--patch 'cluster: {controlPlane: {endpoint: https://x:6443}}'\" may not change "
            "cluster.controlPlane.endpoint",
        ),
    ],
)
def test_bad_input_ends_with_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    line = _one_error_line(_herder(*args, cwd=tmp_path))
    assert line.startswith(message), line


def test_patch_applies_a_vector_in_order(tmp_path: Path) -> None:
    folder = VECTORS / "apply"
    names = ["strategic1.yaml", "jsonpatch1.yaml", "jsonpatch2.yaml", "strategic2.yaml", "strategic3.yaml"]
    args = [arg for name in names for arg in ("--patch", f"@{folder / name}")]
    result = _herder("patch", str(folder / "config.yaml"), *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    [doc] = load_documents(result.stdout)
    assert doc["machine"]["network"]["hostname"] == "foo"
    assert doc["machine"]["network"]["interfaces"][0] == {
        "interface": "eth0",
        "dhcp": False,
        "addresses": ["10.1.2.3/24"],
        "vip": {"ip": "10.3.5.6"},
    }
    assert doc["cluster"]["proxy"]["extraArgs"] == {"metrics-bind-address": "$(POD_IP):10249"}


def test_patch_writes_the_output_file_private(tmp_path: Path) -> None:
    out = tmp_path / "patched.yaml"
    result = _herder(
        "patch",
        str(WORKER_1_11),
        "-p",
        "machine: {network: {hostname: node-1}}",
        "-o",
        str(out),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    [doc] = load_documents(out.read_text())
    assert doc["machine"]["network"]["hostname"] == "node-1"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    valid = _herder("validate", str(out), "--talos-version", "1.11", cwd=tmp_path)
    assert valid.returncode == 0, valid.stderr
