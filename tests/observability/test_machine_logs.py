"""Machine logs kept by herder, end to end on the emulator with herder's CLI: clusters formed from machines
an infra provider makes; ``herder machine logs`` and ``dmesg`` print what herder followed through the
Talos API (``-f`` streams new lines; ``--tail`` and ``--since`` cut); a secret a service prints is kept
redacted; a reader of one cluster reads its machines' logs and not another's; a machine's logs stay
readable after it was reset and destroyed, and after it vanished in the cloud.

The tests of this module run in order on one site, each starting from where the previous one left off.
"""

from __future__ import annotations

import asyncio
import base64
import json
import selectors
import subprocess
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from herder import __version__ as herder_version
from herder.talos.redaction import bundle_secrets, key_forms
from herder.talos.secrets import load_secrets
from tests.api.conftest import make_account
from tests.api.server import HERDER
from tests.clusters.site import Site, cluster, machine_set
from tests.provisioning.provider_site import emu, machine_class, provisioning_site

POLICY = {
    "apiVersion": "herder.dev/v1alpha1",
    "kind": "AccessPolicy",
    "metadata": {"name": "access-policy"},
    "spec": {"rules": [{"users": ["serviceaccount:beta-reader"], "clusters": ["beta"], "role": "Reader"}]},
}

BUDGET = 256 << 10
"""What the site's herder keeps of each machine's logs (the least ``--machine-log-bytes`` takes)."""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with provisioning_site(tmp_path_factory.mktemp("logs"), "--machine-log-bytes", str(BUDGET)) as (s, _):
        s.apply(
            [
                machine_class("emulated", "emu", cpus=2, memoryMiB=2048, diskGiB=10),
                cluster("alpha"),
                machine_set(
                    "alpha",
                    "alpha-control-planes",
                    "controlplane",
                    machineClass={"name": "emulated", "size": 1},
                ),
                machine_set("alpha", "alpha-workers", "worker", machineClass={"name": "emulated", "size": 2}),
                cluster("beta"),
                machine_set(
                    "beta",
                    "beta-control-planes",
                    "controlplane",
                    machineClass={"name": "emulated", "size": 1},
                ),
                POLICY,
            ]
        )
        s.wait("cluster", "alpha", timeout=180)
        s.wait("cluster", "beta", timeout=180)
        yield s


@pytest.fixture(scope="module")
def kubeconfigs(site: Site) -> dict[str, Path]:
    """An Admin's, Support's, and one of role None made Reader of beta by the access policy."""
    support = asyncio.run(make_account(site.server, "support", "Support"))
    beta = asyncio.run(make_account(site.server, "beta-reader", "None"))
    return {
        "Admin": site.server.kubeconfig,
        "Support": site.server.kubeconfig_for(support, "support"),
        "beta-reader": site.server.kubeconfig_for(beta, "beta-reader"),
    }


def machines_of(site: Site, machine_set_name: str) -> list[str]:
    items = site.get("machines", None, "-l", f"herder.dev/machine-set={machine_set_name}")["items"]
    return sorted(m["metadata"]["name"] for m in items)


def herder(
    site: Site, *args: str, kubeconfig: Path | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    result = site.server.run("herder", *args, kubeconfig=kubeconfig)
    if check:
        assert result.returncode == 0, f"herder {' '.join(args)}: {result.stdout}{result.stderr}"
    return result


def logs_of(site: Site, uuid: str, *args: str, kubeconfig: Path | None = None) -> str:
    return herder(site, "machine", "logs", uuid, *args, kubeconfig=kubeconfig).stdout


def test_a_machines_service_logs_and_kernel_log_are_kept(site: Site) -> None:
    (cp,) = machines_of(site, "alpha-control-planes")
    kubelet = site.until(
        lambda: (out := logs_of(site, cp, "kubelet")) and "Successfully registered node" in out and out,
        timeout=30,
        what="the kubelet's lines",
    )
    assert all(line.startswith("I") for line in kubelet.splitlines())  # klog, as the kubelet writes
    every = logs_of(site, cp)
    services = {line.split(": ", 1)[0] for line in every.splitlines()}
    assert {"etcd", "kubelet", "machined", "apid"} <= services
    dmesg = herder(site, "machine", "dmesg", cp).stdout
    assert "Linux version" in dmesg and "[talos]" in dmesg
    assert len(logs_of(site, cp, "kubelet", "--tail", "1").splitlines()) == 1
    stamped = logs_of(site, cp, "kubelet", "--tail", "1", "--timestamps").split()[0]
    assert stamped.endswith("Z") and "T" in stamped
    assert logs_of(site, cp, "kubelet", "--since", "1h") == kubelet
    bad = herder(site, "machine", "logs", cp, "--since", "soon", check=False)
    assert bad.returncode == 1 and "--since" in bad.stderr


def read_until(process: subprocess.Popen[bytes], wanted: str, timeout: float = 30) -> list[str]:
    """The lines ``process`` prints until one contains ``wanted`` (failing after ``timeout``). Its stdout
    must be unbuffered (``bufsize=0``): lines a buffer had read already would not wake the selector."""
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                break
            line = process.stdout.readline().decode()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if wanted in line:
                return lines
    raise AssertionError(f"{wanted!r} not printed within {timeout}s; printed: {lines}")


def trustd_token(site: Site, support: Path) -> str:
    shown = site.server.run("kubectl", "get", "clustersecrets", "alpha", "-o", "json", kubeconfig=support)
    bundle = load_secrets(json.loads(shown.stdout)["spec"]["bundle"], check_keys=False)
    return bundle.trustd_token


def test_follow_streams_new_lines_and_a_secret_printed_is_kept_redacted(
    site: Site, kubeconfigs: dict[str, Path]
) -> None:
    (cp,) = machines_of(site, "alpha-control-planes")
    token = trustd_token(site, kubeconfigs["Support"])
    args = [
        HERDER,
        "machine",
        "logs",
        cp,
        "kubelet",
        "-f",
        "--tail",
        "1",
        "--kubeconfig",
        str(site.server.kubeconfig),
    ]
    follow = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
    try:
        read_until(follow, "kubelet.go")  # the last line kept: the command follows now
        emu(site, "log", cp, "kubelet", "hello from the test")
        assert any("hello from the test" in line for line in read_until(follow, "hello from the test"))
        emu(site, "log", cp, "kubelet", f"joining with --token {token} now")
        printed = read_until(follow, "joining with")
    finally:
        follow.terminate()
        follow.wait(10)
    assert token not in "\n".join(printed) and "--token <redacted> now" in printed[-1]
    assert token not in logs_of(site, cp, "kubelet")
    kept = b"".join(p.read_bytes() for p in (site.server.data_dir / "machine-logs").rglob("*.log"))
    assert b"joining with --token <redacted> now" in kept and token.encode() not in kept


def test_dmesg_follow_streams_what_machined_writes_to_the_kernel_log(site: Site) -> None:
    (cp,) = machines_of(site, "alpha-control-planes")
    args = [HERDER, "machine", "dmesg", cp, "-f", "--kubeconfig", str(site.server.kubeconfig)]
    follow = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
    try:
        read_until(follow, "Linux version")  # what was kept first
        emu(site, "log", cp, "machined", "hello from the kernel test")
        (said,) = [line for line in read_until(follow, "hello from the kernel test") if "kernel test" in line]
    finally:
        follow.terminate()
        follow.wait(10)
    assert "[talos]" in said


def test_a_reader_of_one_cluster_reads_its_machines_logs_and_no_others(
    site: Site, kubeconfigs: dict[str, Path]
) -> None:
    reader = kubeconfigs["beta-reader"]
    (beta_cp,) = machines_of(site, "beta-control-planes")
    (alpha_cp,) = machines_of(site, "alpha-control-planes")
    assert "Successfully registered node" in logs_of(site, beta_cp, "kubelet", kubeconfig=reader)
    refused = herder(site, "machine", "logs", alpha_cp, kubeconfig=reader, check=False)
    unknown = herder(
        site, "machine", "logs", "00000000-0000-0000-0000-000000000000", kubeconfig=reader, check=False
    )
    assert refused.returncode == unknown.returncode == 1
    assert refused.stderr.replace(alpha_cp, "UUID") == unknown.stderr.replace(
        "00000000-0000-0000-0000-000000000000", "UUID"
    )
    assert "not found" in refused.stderr


def secrets_of(site: Site, kubeconfigs: dict[str, Path], cluster_name: str, machines: list[str]) -> set[str]:
    """Every secret herder holds for the cluster: its bundle's tokens and keys (in each form they are
    written), the secrets of its machines' generated configs, and every bearer token of the site."""
    support = kubeconfigs["Support"]
    shown = site.server.run(
        "kubectl", "get", "clustersecrets", cluster_name, "-o", "json", kubeconfig=support
    )
    found = set(bundle_secrets(load_secrets(json.loads(shown.stdout)["spec"]["bundle"], check_keys=False)))
    configs = site.server.run(
        "kubectl", "get", "clustermachineconfigs", *machines, "-o", "json", kubeconfig=support
    )
    items = json.loads(configs.stdout)["items"]
    assert len(items) == len(machines)

    def walk(node: object, key: str = "") -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, k)
        elif isinstance(node, list):
            for v in node:
                walk(v, key)
        elif isinstance(node, str) and key.lower() in SECRET_KEYS and len(node) >= 8:
            found.add(node)
            if node.startswith("LS0t"):
                found.update(key_forms(base64.b64decode(node)))

    for item in items:
        for document in yaml.safe_load_all(item["spec"]["config"]):
            walk(document)
    for kubeconfig in [*kubeconfigs.values(), site.workdir / "emu.kubeconfig"]:
        found.add(str(yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]))
    return found


SECRET_KEYS = {
    "key",
    "token",
    "secret",
    "secretboxencryptionsecret",
    "aescbcencryptionsecret",
    "bootstraptoken",
}


def support_bundle(site: Site, name: str, kubeconfig: Path) -> dict[str, str]:
    path = site.workdir / f"{name}-{kubeconfig.stem}.zip"
    made = herder(site, "cluster", "support", name, "-o", str(path), kubeconfig=kubeconfig)
    assert f"written to {path}" in made.stderr
    assert path.stat().st_mode & 0o077 == 0
    with zipfile.ZipFile(path) as archive:
        return {n: archive.read(n).decode() for n in archive.namelist()}


def test_a_support_bundle_holds_what_it_says_and_no_secret(site: Site, kubeconfigs: dict[str, Path]) -> None:
    files = support_bundle(site, "alpha", site.server.kubeconfig)
    machines = [*machines_of(site, "alpha-control-planes"), *machines_of(site, "alpha-workers")]
    (cp,) = machines_of(site, "alpha-control-planes")
    readme = files["README.txt"]
    assert readme.startswith("Support bundle of cluster default/alpha")
    assert all(f"  {name}" in readme for name in files)  # it lists every file
    assert "Not gathered" not in readme, readme
    assert yaml.safe_load(files["cluster.yaml"])["metadata"]["name"] == "alpha"
    for uuid in machines:
        assert yaml.safe_load(files[f"objects/Machine/{uuid}.yaml"])["metadata"]["name"] == uuid
        assert "kubelet: " in files[f"machines/{uuid}/logs.txt"]
        assert "Linux version" in files[f"machines/{uuid}/dmesg.txt"]
    assert (
        "objects/MachineSet/alpha-workers.yaml" in files and "objects/ControlPlaneStatus/alpha.yaml" in files
    )
    assert (
        yaml.safe_load(files["objects/ClusterSecrets/alpha.yaml"])["spec"] == "(left out: a sensitive kind)"
    )
    assert "Cluster/alpha\tReady\tTrue" in files["conditions.txt"]
    # The Events of the cluster and of its objects.
    told = {e["object"].split("/")[0] for e in yaml.safe_load(files["events.yaml"])}
    assert {"Cluster", "ClusterMachine"} <= told, told
    assert any(e["kind"] == "Cluster" and e["name"] == "alpha" for e in yaml.safe_load(files["audit.yaml"]))
    assert "rollouts" in yaml.safe_load(files["rollouts.yaml"])
    (member,) = yaml.safe_load(files["etcd/members.yaml"])
    assert member["hostname"]
    assert set(yaml.safe_load(files["etcd/status.yaml"])) == {cp}
    assert json.loads(files["kubernetes/version.json"])["gitVersion"] == "v1.33.0"
    assert len(yaml.safe_load(files["kubernetes/nodes.yaml"])) == 3
    versions = yaml.safe_load(files["versions.yaml"])
    assert versions["herder"] == herder_version
    assert versions["cluster"] == {
        "talos": "v1.13.9",
        "kubernetes": "1.33.0",
        "talosContract": versions["cluster"]["talosContract"],
    }
    assert all(versions["machines"][uuid]["talos"] == "v1.13.9" for uuid in machines)
    assert "--token <redacted> now" in files[f"machines/{cp}/logs.txt"]  # the secret printed earlier

    secrets = secrets_of(site, kubeconfigs, "alpha", machines)
    leaks = [(name, s[:12]) for name, text in files.items() for s in secrets if s in text]
    assert leaks == []
    assert not any("PRIVATE KEY" in text for text in files.values())

    # A Reader of beta gets beta's, without the audit trail, and nothing of alpha.
    reader = kubeconfigs["beta-reader"]
    theirs = support_bundle(site, "beta", reader)
    assert (
        "audit.yaml" not in theirs
        and "audit.yaml: the audit trail is for Admins and Support" in theirs["README.txt"]
    )
    assert not any(uuid in name for name in theirs for uuid in machines)
    refused = herder(
        site,
        "cluster",
        "support",
        "alpha",
        "-o",
        str(site.workdir / "no.zip"),
        kubeconfig=reader,
        check=False,
    )
    assert refused.returncode == 1 and "not found" in refused.stderr


def test_a_machines_logs_keep_to_the_bytes_serve_was_given_dropping_the_oldest(site: Site) -> None:
    (cp,) = machines_of(site, "beta-control-planes")
    filler = "x" * (15 << 10)
    for n in range(BUDGET // len(filler) + 8):  # half as much again as it keeps
        asyncio.run(
            site.emulator.control(
                "POST", f"/machines/{cp}/logs", {"service": "kubelet", "line": f"#{n} {filler}"}
            )
        )
    last = f"#{BUDGET // len(filler) + 7} "
    site.until(lambda: last in logs_of(site, cp, "kubelet"), timeout=60, what="the last line kept")
    kept = sum(
        f.stat().st_size for f in (site.server.data_dir / "machine-logs").glob(f"*/{cp}/*") if f.is_file()
    )
    assert BUDGET // 2 < kept <= BUDGET
    assert "#0 " not in logs_of(site, cp, "kubelet")


def test_a_machines_logs_outlive_its_reset_and_its_destruction(
    site: Site, kubeconfigs: dict[str, Path]
) -> None:
    before = machines_of(site, "alpha-workers")
    site.run(
        "kubectl",
        "patch",
        "machineset",
        "alpha-workers",
        "--type=merge",
        "-p",
        '{"spec":{"machineClass":{"size":1}}}',
    )
    site.until(lambda: len(machines_of(site, "alpha-workers")) == 1, timeout=120, what="a worker released")
    (gone,) = set(before) - set(machines_of(site, "alpha-workers"))
    site.until(
        lambda: gone not in {m["metadata"]["name"] for m in site.get("machines")["items"]},
        timeout=120,
        what="the released worker destroyed",
    )
    every = logs_of(site, gone)
    assert "kubelet: " in every and "reset sequence" in every
    assert "Linux version" in herder(site, "machine", "dmesg", gone).stdout
    # Its cluster's readers only, as while it lived.
    refused = herder(site, "machine", "logs", gone, kubeconfig=kubeconfigs["beta-reader"], check=False)
    assert refused.returncode == 1 and "not found" in refused.stderr


def test_a_machines_logs_outlive_its_vanishing_in_the_cloud(site: Site) -> None:
    (worker,) = machines_of(site, "alpha-workers")
    said = logs_of(site, worker, "kubelet")
    emu(site, "fault", worker, "vanish")
    site.until(
        lambda: worker not in {m["metadata"]["name"] for m in site.get("machines")["items"]},
        timeout=120,
        what="the vanished worker's Machine gone",
    )
    assert logs_of(site, worker, "kubelet") == said
