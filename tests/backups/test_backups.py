"""etcd backups end to end on the emulator, driven as users drive them (kubectl, ``herder cluster backup``):
a cluster with a short interval takes encrypted backups into herder's folder and into an S3 bucket (moto's
server on loopback), keeps only its retention, shows a store that stops on its status and recovers when it
is back, and a new cluster restored from a backup has the ConfigMap created before it; a tampered backup,
and one of another account, are refused.

The steps share one site and run in order: each builds on what the one before left.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
import yaml

from tests.api.server import KUBECTL, free_port
from tests.clusters.site import Site, cluster, machine_class, machine_set, running_site

BUCKET = "etcd-backups"
SECRET = "moto-secret-key-of-the-test"
MARKER = "restored-from-a-backup"
SECRET_MARKER = "a-secret-restored-from-a-backup"
INTERVAL = "2s"


class Moto:
    """moto's S3 server as a child process on a loopback port, ended by its PID."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.log = workdir / "moto.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        program = str(Path(sys.executable).with_name("moto_server"))
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [program, "-H", "127.0.0.1", "-p", str(self.port)], stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(self.endpoint, timeout=1)
                break
            time.sleep(0.1)
        # moto keeps its buckets in memory: each start begins empty, as a bucket an Admin made.
        self.s3().create_bucket(Bucket=BUCKET)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def s3(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key=SECRET,
        )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with running_site(tmp_path_factory.mktemp("backups"), 3) as s:
        yield s


@pytest.fixture(scope="module")
def moto(site: Site) -> Iterator[Moto]:
    server = Moto(site.workdir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == kind), {})


def _backups(site: Site, name: str) -> list[dict[str, Any]]:
    items = site.get("etcdbackups", None, "-l", f"herder.dev/cluster={name}")["items"]
    return [b for b in items if not b["metadata"].get("deletionTimestamp")]


def _kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, timeout=60
    )


def _patch(
    site: Site, kind: str, name: str, body: str, how: str = "merge", check: bool = True
) -> subprocess.CompletedProcess[str]:
    return site.run("kubectl", "patch", kind, name, "--type", how, "-p", body, check=check)


def _restore(site: Site, name: str, machine: str, backup: dict[str, Any], namespace: str = "default") -> Any:
    spec = backup["spec"]
    documents = [
        {**cluster(name), "metadata": {"name": name, "namespace": namespace}},
        {
            **machine_set(
                name,
                f"{name}-control-planes",
                "controlplane",
                machines=[machine],
                bootstrapSpec={"clusterUUID": spec["clusterUUID"], "snapshot": spec["snapshot"]},
            )
        },
    ]
    return site.apply(documents)


def _form(site: Site, name: str, machine: str, **spec: Any) -> None:
    site.apply(
        [
            cluster(name, **spec),
            machine_set(name, f"{name}-control-planes", "controlplane", machines=[machine]),
        ]
    )
    site.wait("cluster", name, timeout=120)


def test_scheduled_and_manual_backups_into_the_folder_store(site: Site) -> None:
    machines = [m["uuid"] for m in site.machines]
    # A backup by hand first, on no schedule: with one, retention may prune it before it is read.
    _form(site, "alpha", machines[0])
    kubeconfig = site.workdir / "alpha.kubeconfig"
    site.run("herder", "cluster", "kubeconfig", "alpha", "-o", str(kubeconfig))
    made = _kubectl(kubeconfig, "create", "configmap", "kept", f"--from-literal=note={MARKER}")
    assert made.returncode == 0, made.stderr
    # A Secret too: the cluster's kube-apiserver keeps it encrypted with the cluster's encryption secret.
    made = _kubectl(kubeconfig, "create", "secret", "generic", "kept", f"--from-literal=note={SECRET_MARKER}")
    assert made.returncode == 0, made.stderr

    taken = site.run("herder", "cluster", "backup", "alpha").stdout.strip()
    backup = site.get("etcdbackup", taken)
    spec = backup["spec"]
    uid = site.get("cluster", "alpha")["metadata"]["uid"]
    assert spec["clusterUUID"] == uid and spec["store"] == "default" and spec["size"] > 0
    assert spec["checksum"].startswith("sha256:")

    # The file in herder's folder store is the backup, encrypted: nothing of the cluster reads in it.
    raw = (site.server.data_dir / "backups" / uid / spec["snapshot"]).read_bytes()
    assert len(raw) == spec["size"]
    assert MARKER.encode() not in raw and b"ConfigMap" not in raw and b"herder-emu-etcd-snapshot" not in raw

    status = site.get("cluster", "alpha")["status"]
    assert status["backups"]["lastSuccessTime"] and not status["backups"]["lastError"]
    assert _condition(site.get("cluster", "alpha"), "BackupsHealthy")["status"] == "True"

    # On a schedule, retention keeps the newest two, their files included.
    schedule = json.dumps({"spec": {"backups": {"interval": INTERVAL, "retention": 2}}})
    site.run("kubectl", "patch", "cluster", "alpha", "--type", "merge", "-p", schedule)
    site.until(
        lambda: "BackupsPruned" in site.run("kubectl", "get", "events").stdout, timeout=60, what="a prune"
    )
    site.until(lambda: len(_backups(site, "alpha")) <= 2, timeout=30, what="at most two backups kept")
    site.until(
        lambda: len(list((site.server.data_dir / "backups" / uid).iterdir())) <= 2,
        timeout=30,
        what="pruned files removed",
    )

    table = site.run("kubectl", "get", "etcdbackups").stdout
    header = table.splitlines()[0].split()
    assert header[:5] == ["NAME", "CLUSTER", "TIME", "SIZE", "STORE"], table
    rows = [line.split() for line in table.splitlines()[1:]]
    assert rows and all(
        row[0].startswith("alpha-") and row[1] == "alpha" and row[4] == "default" for row in rows
    )
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", row[2]) for row in rows), table
    assert all(re.fullmatch(r"\d+(\.\d)?(B|KiB|MiB)", row[3]) for row in rows), table

    metrics = site.run("kubectl", "get", "--raw", "/metrics").stdout
    assert 'herder_etcd_backup_age_seconds{cluster="alpha",namespace="default"}' in metrics
    assert 'herder_etcd_backups_total{cluster="alpha",namespace="default"}' in metrics


def test_backups_into_s3_survive_the_server_stopping(site: Site, moto: Moto) -> None:
    site.apply(
        [
            {
                "apiVersion": "herder.dev/v1alpha1",
                "kind": "BackupStore",
                "metadata": {"name": "s3"},
                "spec": {
                    "s3": {
                        "bucket": BUCKET,
                        "region": "us-east-1",
                        "endpoint": moto.endpoint,
                        "accessKeyID": "test",
                        "secretAccessKey": SECRET,
                    }
                },
            }
        ]
    )
    # The store's credentials are sealed at rest: the server's database never holds them in the clear.
    for path in site.server.data_dir.glob("herder.db*"):
        assert SECRET.encode() not in path.read_bytes(), path

    _patch(
        site, "cluster", "alpha", f'{{"spec": {{"backups": {{"interval": "{INTERVAL}", "store": "s3"}}}}}}'
    )
    uid = site.get("cluster", "alpha")["metadata"]["uid"]
    in_s3 = site.until(
        lambda: [b for b in _backups(site, "alpha") if b["spec"]["store"] == "s3"],
        timeout=30,
        what="an S3 backup",
    )
    spec = in_s3[0]["spec"]
    raw = moto.s3().get_object(Bucket=BUCKET, Key=f"{uid}/{spec['snapshot']}")["Body"].read()
    assert len(raw) == spec["size"]
    assert MARKER.encode() not in raw and b"ConfigMap" not in raw

    # The S3 server stops: the error shows on the cluster, older backups stay.
    moto.stop()
    before = site.get("cluster", "alpha")["status"]["backups"]["lastSuccessTime"]
    failed = site.until(
        lambda: (
            (c := _condition(site.get("cluster", "alpha"), "BackupsHealthy")).get("status") == "False" and c
        ),
        timeout=60,
        what="BackupsHealthy False",
    )
    assert "127.0.0.1" in failed["message"] and "s3" in failed["message"], failed
    backups = site.get("cluster", "alpha")["status"]["backups"]
    assert backups["lastError"] and backups["lastSuccessTime"] == before and backups["failures"] >= 1
    assert len(_backups(site, "alpha")) >= 2
    assert SECRET not in site.run("kubectl", "get", "events").stdout
    denied = site.run("herder", "cluster", "backup", "alpha", check=False)
    assert denied.returncode != 0 and "failed" in denied.stderr, denied

    # It is back: backups go on, and the error clears.
    moto.start()
    site.until(
        lambda: _condition(site.get("cluster", "alpha"), "BackupsHealthy").get("status") == "True",
        timeout=60,
        what="BackupsHealthy True again",
    )
    assert not site.get("cluster", "alpha")["status"]["backups"]["lastError"]
    assert moto.s3().list_objects_v2(Bucket=BUCKET, Prefix=f"{uid}/")["KeyCount"] >= 1


def test_a_tampered_backup_is_refused(site: Site, moto: Moto) -> None:
    machines = [m["uuid"] for m in site.machines]
    # Retention must not prune the backup before the restore reads it, however slow this machine is.
    _patch(site, "cluster", "alpha", '{"spec": {"backups": {"retention": 100}}}')
    taken = site.run("herder", "cluster", "backup", "alpha").stdout.strip()
    backup = site.get("etcdbackup", taken)
    spec = backup["spec"]
    assert spec["store"] == "s3"
    # The object in the bucket is replaced by a changed copy, as anyone with the bucket's keys could.
    key = f"{spec['clusterUUID']}/{spec['snapshot']}"
    raw = bytearray(moto.s3().get_object(Bucket=BUCKET, Key=key)["Body"].read())
    raw[-20] ^= 0xFF
    moto.s3().put_object(Bucket=BUCKET, Key=key, Body=bytes(raw))

    _restore(site, "gamma", machines[2], backup)
    refused = site.until(
        lambda: (
            (c := _condition(site.get("cluster", "gamma"), "EtcdRestored")).get("status") == "False" and c
        ),
        timeout=90,
        what="the restore refused",
    )
    assert "checksum" in refused["message"] and taken in refused["message"], refused
    events = site.run("kubectl", "get", "events", "--field-selector", "involvedObject.name=gamma").stdout
    assert "BackupRefused" in events
    assert not (site.get("cluster", "gamma")["status"].get("bootstrap") or {}).get("completedAt")


def test_a_new_cluster_is_restored_from_a_backup(site: Site) -> None:
    machines = [m["uuid"] for m in site.machines]
    # Stop the schedule so that retention leaves the backups to restore from where they are.
    _patch(site, "cluster", "alpha", '[{"op": "remove", "path": "/spec/backups"}]', "json")
    taken = site.run("herder", "cluster", "backup", "alpha").stdout.strip()
    backup = site.get("etcdbackup", taken)
    assert backup["spec"]["store"] == "default"

    # The cluster is lost: its backups and their key stay behind.
    site.run("kubectl", "delete", "cluster", "alpha", "--timeout=120s", timeout=180)
    assert site.get("etcdbackup", taken)["spec"] == backup["spec"]
    _restore(site, "beta", machines[1], backup)
    site.wait("cluster", "beta", timeout=120)
    restored = _condition(site.get("cluster", "beta"), "EtcdRestored")
    assert restored["status"] == "True" and backup["spec"]["snapshot"] in restored["message"], restored

    kubeconfig = site.workdir / "beta.kubeconfig"
    site.run("herder", "cluster", "kubeconfig", "beta", "-o", str(kubeconfig))
    found = site.until(
        lambda: (
            (r := _kubectl(kubeconfig, "get", "configmap", "kept", "-o", "jsonpath={.data.note}")).returncode
            == 0
            and r.stdout
        ),
        timeout=30,
        what="the ConfigMap in the restored cluster",
    )
    assert found == MARKER
    # The Secret reads back: the restored cluster runs with the encryption secrets the backup carries.
    assert backup["spec"]["encryptionSecrets"]
    secret = _kubectl(kubeconfig, "get", "secret", "kept", "-o", "jsonpath={.data.note}")
    assert secret.returncode == 0, secret.stderr
    assert base64.b64decode(secret.stdout).decode() == SECRET_MARKER
    events = site.run("kubectl", "get", "events", "--field-selector", "involvedObject.name=beta").stdout
    assert "EncryptionSecretsRestored" in events

    # A restored set's bootstrapSpec cannot change.
    changed = _patch(
        site,
        "machineset",
        "beta-control-planes",
        '{"spec": {"bootstrapSpec": {"clusterUUID": "x", "snapshot": "y"}}}',
        check=False,
    )
    assert changed.returncode != 0 and "bootstrapSpec" in changed.stderr


def test_a_backup_of_another_account_is_not_found(site: Site) -> None:
    backup = _backups(site, "alpha")[0]
    site.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}}])
    site.apply(
        [{**machine_class("any", {"pool": "none"}), "metadata": {"name": "any", "namespace": "other"}}]
    )
    spec = backup["spec"]
    documents = [
        {**cluster("delta"), "metadata": {"name": "delta", "namespace": "other"}},
        {
            **machine_set(
                "delta",
                "delta-control-planes",
                "controlplane",
                machineClass={"name": "any", "size": 1},
                bootstrapSpec={"clusterUUID": spec["clusterUUID"], "snapshot": spec["snapshot"]},
            ),
            "metadata": {
                "name": "delta-control-planes",
                "namespace": "other",
                "labels": {"herder.dev/cluster": "delta"},
            },
        },
    ]
    path = site.workdir / "delta.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    answer = site.run("kubectl", "apply", "-f", str(path), check=False)
    assert answer.returncode != 0
    assert "spec.bootstrapSpec.snapshot" in answer.stderr and "namespace other" in answer.stderr, (
        answer.stderr
    )
