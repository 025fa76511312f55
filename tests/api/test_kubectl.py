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


def test_kubectl_label_annotate_patch_and_herder_keys(server: Server, tmp_path: Path) -> None:
    manifest = tmp_path / "keys.yaml"
    manifest.write_text(MANIFEST.replace("ntp", "keys").replace("{description}", "k"))
    assert server.run("kubectl", "apply", "-f", str(manifest)).returncode == 0
    assert "labeled" in server.run("kubectl", "label", "cp", "keys", "team=a").stdout
    assert "annotated" in server.run("kubectl", "annotate", "cp", "keys", "note=x").stdout
    patched = server.run(
        "kubectl", "patch", "cp", "keys", "--type", "merge", "-p", '{"spec":{"description":"p"}}'
    )
    assert "patched" in patched.stdout, patched.stderr
    refused = server.run("kubectl", "label", "cp", "keys", "herder.dev/hidden=true")
    assert refused.returncode != 0
    assert "Error from server (Forbidden): label herder.dev/hidden is set by herder" in refused.stderr


def test_kubectl_revokes_a_token_by_deleting_it(server: Server) -> None:
    created = server.run("herder", "serviceaccount", "create", "short", "--role", "Reader")
    token = created.stdout.strip()
    kubeconfig = server.kubeconfig_for(token, "short")
    assert server.run("kubectl", "get", "ns", kubeconfig=kubeconfig).returncode == 0
    name = token.split("_")[1]
    assert f'token.herder.dev "{name}" deleted' in server.run("kubectl", "delete", "token", name).stdout
    denied = server.run("kubectl", "get", "ns", kubeconfig=kubeconfig)
    assert "You must be logged in to the server" in denied.stderr


def test_official_python_client_discovers_lists_and_watches(server: Server) -> None:
    from kubernetes import config, dynamic
    from kubernetes.client import ApiClient, Configuration

    configuration = Configuration()
    config.load_kube_config(config_file=str(server.kubeconfig), client_configuration=configuration)
    client = dynamic.DynamicClient(ApiClient(configuration=configuration))
    patches = client.resources.get(api_version="herder.dev/v1alpha1", kind="ConfigPatch")
    body = {"apiVersion": "herder.dev/v1alpha1", "kind": "ConfigPatch", "metadata": {"name": "dynamic"}}
    patches.create(body={**body, "spec": {"data": "a: 1"}}, namespace="default")
    assert "dynamic" in [item.metadata.name for item in patches.get(namespace="default").items]
    seen = [event["object"].metadata.name for event in patches.watch(namespace="default", timeout=1)]
    assert "dynamic" in seen
