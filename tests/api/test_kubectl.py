"""The real kubectl against a real ``herder serve``: HTTPS and the admin kubeconfig with no other step."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import yaml

from tests.api.server import Server

MANIFEST = """\
apiVersion: herder.dev/v1alpha1
kind: ConfigPatch
metadata:
  name: ntp
  labels:
    herder.dev/cluster: demo
spec:
  data: "machine: {time: {servers: [time.example.com]}}"
  description: {description}
"""


def test_admin_kubeconfig_is_private_and_works(server: Server) -> None:
    assert stat.S_IMODE(os.stat(server.kubeconfig).st_mode) == 0o600
    doc = yaml.safe_load(server.kubeconfig.read_text())
    assert doc["clusters"][0]["cluster"]["server"] == server.url
    result = server.run("kubectl", "get", "ns")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[:3] == ["NAME", "STATUS", "AGE"]
    assert "default" in result.stdout and "Active" in result.stdout


def test_apply_creates_then_updates_and_get_shows_printer_columns(server: Server, tmp_path: Path) -> None:
    manifest = tmp_path / "ntp.yaml"
    manifest.write_text(MANIFEST.replace("{description}", "first"))
    created = server.run("kubectl", "apply", "-f", str(manifest))
    assert created.returncode == 0, created.stderr
    assert "configpatch.herder.dev/ntp created" in created.stdout
    manifest.write_text(MANIFEST.replace("{description}", "second"))
    updated = server.run("kubectl", "apply", "-f", str(manifest))
    assert updated.returncode == 0, updated.stderr
    assert "configpatch.herder.dev/ntp configured" in updated.stdout

    table = server.run("kubectl", "get", "configpatches")
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()[:2]
    assert header.split() == ["NAME", "CLUSTER", "AGE"]
    assert row.split()[:2] == ["ntp", "demo"]
    as_json = json.loads(server.run("kubectl", "get", "cp", "ntp", "-o", "json").stdout)
    assert as_json["spec"]["description"] == "second"
    assert as_json["metadata"]["generation"] == 2


def test_reader_sees_but_may_not_change(server: Server, reader_kubeconfig: Path, tmp_path: Path) -> None:
    listed = server.run("kubectl", "get", "ns", kubeconfig=reader_kubeconfig)
    assert listed.returncode == 0, listed.stderr
    manifest = tmp_path / "reader.yaml"
    manifest.write_text(MANIFEST.replace("ntp", "by-reader").replace("{description}", "x"))
    refused = server.run("kubectl", "apply", "-f", str(manifest), kubeconfig=reader_kubeconfig)
    assert refused.returncode != 0
    assert "Error from server (Forbidden)" in refused.stderr
    assert (
        'configpatches "by-reader" is forbidden: serviceaccount:as-reader (role Reader) cannot create resource '
        '"configpatches" in API group "herder.dev" in the namespace "default"'
    ) in refused.stderr


def test_unauthenticated_kubectl_gets_401(server: Server, tmp_path: Path) -> None:
    bogus = server.kubeconfig_for("hdr_nobody-00000000_" + "0" * 64, "bogus")
    result = server.run("kubectl", "get", "ns", kubeconfig=bogus)
    assert result.returncode != 0
    assert "You must be logged in to the server (invalid bearer token: unknown or revoked)" in result.stderr
