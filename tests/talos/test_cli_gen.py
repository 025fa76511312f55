"""``herder talos gen`` run as a real process: it writes what the library generates, matches Talos's goldens
given the same flags, and every bad input ends with one line on stderr and a non-zero exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from herder.talos.contracts import VersionContract
from herder.talos.documents import load_documents
from herder.talos.generate import ConfigInput, MachineType, generate_bundle
from herder.talos.secrets import load_secrets_file
from herder.talos.talosconfig import load_talosconfig_file
from tests.data import TALOS

GOLDEN = TALOS / "golden"


def herder(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from herder.cli.main import main; main()", "talos", "gen", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=cwd,
    )


def assert_one_line_failure(result: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for text in expected:
        assert text in lines[0]


def test_gen_secrets_writes_a_loadable_private_bundle(tmp_path: Path) -> None:
    target = tmp_path / "secrets.yaml"
    result = herder("secrets", "-o", str(target), "--talos-version", "v1.13.2")
    assert result.returncode == 0, result.stderr
    bundle = load_secrets_file(target)
    assert bundle.secretbox_encryption_secret
    assert target.stat().st_mode & 0o777 == 0o600

    again = herder("secrets", "-o", str(target))
    assert_one_line_failure(again, str(target), "already exists", "--force")
    assert load_secrets_file(target) == bundle

    assert herder("secrets", "-o", str(target), "--force").returncode == 0
    assert load_secrets_file(target) != bundle


@pytest.mark.parametrize("contract", ["1.11", "1.14"])
def test_gen_config_equals_the_base_golden(tmp_path: Path, contract: str) -> None:
    # talosctl's defaults add an install disk and image; empty flags give the generator's bare defaults.
    result = herder(
        "config",
        "base",
        "https://base:6443",
        "--talos-version",
        contract,
        "--kubernetes-version",
        "1.28.0",
        "--with-secrets",
        str(GOLDEN / "secrets.yaml"),
        "--install-disk",
        "",
        "--install-image",
        "",
        "-o",
        str(tmp_path / "out"),
    )
    assert result.returncode == 0, result.stderr
    for machine_type in ("controlplane", "worker"):
        written = load_documents((tmp_path / "out" / f"{machine_type}.yaml").read_text())
        assert written == load_documents((GOLDEN / f"v{contract}" / f"base-{machine_type}.yaml").read_text())


def test_gen_config_flags_mean_what_talosctl_means(tmp_path: Path) -> None:
    patch_file = tmp_path / "patch.yaml"
    patch_file.write_text((GOLDEN / "patch.yaml").read_text())
    out = tmp_path / "out"
    result = herder(
        "config",
        "demo",
        "https://demo.example:6443",
        "--talos-version",
        "v1.14.1",
        "--kubernetes-version",
        "v1.33.2",
        "--with-secrets",
        str(GOLDEN / "secrets.yaml"),
        "--additional-sans",
        "foo,bar",
        "--additional-sans",
        "baz",
        "--dns-domain",
        "example.com",
        "--install-disk",
        "/dev/vda",
        "--registry-mirror",
        "ghcr.io=https://mirror-a,docker.io=https://mirror-b",
        "--with-kubespan",
        "--config-patch",
        f"@{patch_file}",
        "--config-patch-control-plane",
        "apiVersion: v1alpha1\nkind: KubeProxyConfig\nconfig:\n  mode: ipvs\n",
        "--config-patch-worker",
        "apiVersion: v1alpha1\nkind: KubeNodeConfig\nlabels:\n  pool: blue\n",
        "-o",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    expected = generate_bundle(
        ConfigInput(
            cluster_name="demo",
            endpoint="https://demo.example:6443",
            kubernetes_version="1.33.2",
            contract=VersionContract(1, 14),
            secrets=load_secrets_file(GOLDEN / "secrets.yaml"),
            additional_sans=["foo", "bar", "baz"],
            dns_domain="example.com",
            install_disk="/dev/vda",
            install_image="ghcr.io/siderolabs/installer:v1.14.1",
            registry_mirrors={"ghcr.io": ["https://mirror-a"], "docker.io": ["https://mirror-b"]},
            kubespan=True,
        ),
        patches=[(GOLDEN / "patch.yaml").read_text()],
        control_plane_patches=["apiVersion: v1alpha1\nkind: KubeProxyConfig\nconfig:\n  mode: ipvs\n"],
        worker_patches=["apiVersion: v1alpha1\nkind: KubeNodeConfig\nlabels:\n  pool: blue\n"],
    )
    assert load_documents((out / "controlplane.yaml").read_text()) == load_documents(expected.controlplane)
    assert load_documents((out / "worker.yaml").read_text()) == load_documents(expected.worker)
    worker = load_documents((out / "worker.yaml").read_text())
    assert next(d for d in worker if d.get("kind") == "KubeNodeConfig")["labels"] == {"pool": "blue"}
    assert next(d for d in worker if d.get("kind") == "KubeletConfig")["clusterDNS"] == ["3.3.3.3"]

    talosconfig = load_talosconfig_file(out / "talosconfig")
    assert talosconfig.context == "demo"
    ctx = talosconfig.current()
    (tmp_path / "ca.pem").write_bytes(ctx.ca)
    (tmp_path / "client.pem").write_bytes(ctx.crt)
    verify = subprocess.run(
        ["openssl", "verify", "-CAfile", str(tmp_path / "ca.pem"), str(tmp_path / "client.pem")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verify.returncode == 0, verify.stderr


def test_gen_config_without_secrets_uses_fresh_ones(tmp_path: Path) -> None:
    result = herder(
        "config", "c1", "https://10.0.0.1:6443", "--talos-version", "1.12", "--kubernetes-version", "1.32.4",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (cp, *_) = load_documents((tmp_path / "controlplane.yaml").read_text())
    assert cp["cluster"]["clusterName"] == "c1"
    assert cp["machine"]["install"] == {
        "disk": "/dev/sda",
        "image": "ghcr.io/siderolabs/installer:v1.12.0",
        "wipe": False,
        "grubUseUKICmdline": True,
    }
    assert cp["machine"]["token"] != load_secrets_file(GOLDEN / "secrets.yaml").trustd_token
    assert (
        MachineType.WORKER.value
        == load_documents((tmp_path / "worker.yaml").read_text())[0]["machine"]["type"]
    )


def test_gen_config_writes_a_talosconfig_whose_key_openssl_loads(tmp_path: Path) -> None:
    result = herder(
        "config", "c1", "https://10.0.0.1:6443", "--talos-version", "1.14", "--kubernetes-version", "1.32.4",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    context = load_talosconfig_file(tmp_path / "talosconfig").current()
    (tmp_path / "client.key").write_bytes(context.key)
    (tmp_path / "client.crt").write_bytes(context.crt)
    loaded = subprocess.run(
        ["openssl", "pkey", "-in", str(tmp_path / "client.key"), "-noout", "-text"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert loaded.returncode == 0 and "ED25519 Private-Key" in loaded.stdout, loaded.stderr
    # The key is the certificate's: OpenSSL pairs them.
    paired = subprocess.run(
        ["openssl", "x509", "-in", str(tmp_path / "client.crt"), "-noout", "-pubkey"],
        capture_output=True,
        text=True,
        check=False,
    )
    public = subprocess.run(
        ["openssl", "pkey", "-in", str(tmp_path / "client.key"), "-pubout"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert paired.stdout == public.stdout and paired.stdout.startswith("-----BEGIN PUBLIC KEY-----")


GOOD = ["base", "https://base:6443", "--talos-version", "1.14", "--kubernetes-version", "1.28.0"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--talos-version", "1.99"], ["unsupported Talos version '1.99'"]),
        (["--talos-version", "banana"], ["invalid Talos version 'banana'"]),
        (["--kubernetes-version", "1.28"], ["invalid Kubernetes version '1.28'"]),
        (["--config-patch", "machine: [unclosed"], ["malformed patch"]),
        (["--config-patch", "@/nonexistent/patch.yaml"], ["--config-patch", "/nonexistent/patch.yaml"]),
        (
            ["--with-secrets", str(TALOS / "fixtures" / "invalid-secrets.yaml")],
            ["cluster.secret is required"],
        ),
        (["--registry-mirror", "ghcr.io"], ["invalid registry mirror spec 'ghcr.io'"]),
    ],
    ids=["talos-version", "talos-version-syntax", "k8s-version", "patch", "patch-file", "secrets", "mirror"],
)
def test_gen_config_bad_input(tmp_path: Path, args: list[str], expected: list[str]) -> None:
    result = herder("config", *GOOD, "-o", str(tmp_path / "out"), *args)
    assert_one_line_failure(result, *expected)
    assert not (tmp_path / "out").exists()


def test_gen_config_bad_endpoint(tmp_path: Path) -> None:
    result = herder("config", "base", "http://base:6443", *GOOD[2:], "-o", str(tmp_path))
    assert_one_line_failure(result, "invalid cluster endpoint", "https")


def test_gen_config_unwritable_output(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = herder("config", *GOOD, "-o", str(blocker / "out"))
    assert_one_line_failure(result, str(blocker))
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "worker.yaml").write_text("mine")
    result = herder("config", *GOOD, "-o", str(existing))
    assert_one_line_failure(result, "worker.yaml", "already exists")
    assert (existing / "worker.yaml").read_text() == "mine"
    assert not (existing / "controlplane.yaml").exists()
