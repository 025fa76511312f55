"""Access for many users, end to end on the emulator with the real kubectl: an AccessPolicy in Omni's
format (user groups by name, match and label selector; cluster groups by match; tests that refuse a bad
write) gives an identity of role None Operator on one of two clusters; it lists only that cluster, scales
it, is 404 on the other; through herder's Kubernetes proxy it reads pods, is refused a delete with
Kubernetes' 403, and exec, logs -f and port-forward work; revoking its token ends an open watch within
5 s and the next request is 401; the Talos gateway follows the per-cluster role."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from herder.talos.talosconfig import load_talosconfig_file
from tests.api.server import HERDER, KUBECTL, free_port
from tests.clusters.site import Site, cluster, machine_set, running_site

POLICY = {
    "apiVersion": "herder.dev/v1alpha1",
    "kind": "AccessPolicy",
    "metadata": {"name": "access-policy"},
    "spec": {
        "usergroups": {
            "support-staff": {"users": [{"name": "serviceaccount:ops"}]},
            "contractors": {"users": [{"match": "serviceaccount:contractor-*"}]},
            "team-a": {"users": [{"labelselectors": ["team=a"]}]},
        },
        "clustergroups": {"alphas": {"clusters": [{"match": "alpha*"}]}},
        "rules": [
            {
                "users": ["group/team-a"],
                "clusters": ["group/alphas"],
                "role": "Operator",
                "kubernetes": {"impersonate": {"groups": ["read-only"]}},
            },
            {"users": ["group/contractors", "group/support-staff"], "clusters": ["beta"], "role": "Reader"},
        ],
        "tests": [
            {
                "name": "team a operates alpha",
                "user": {"name": "serviceaccount:alice", "labels": {"team": "a"}},
                "cluster": {"name": "alpha"},
                "expected": {"role": "Operator", "kubernetes": {"impersonate": {"groups": ["read-only"]}}},
            },
            {
                "name": "team a has nothing on beta",
                "user": {"name": "serviceaccount:alice", "labels": {"team": "a"}},
                "cluster": {"name": "beta"},
                "expected": {"role": "None"},
            },
        ],
    },
}
READ_ONLY_BINDING = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: read-only-view}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: read-only}]
"""
WEB = """
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers:
  - {name: web, image: "nginx:1.27", ports: [{containerPort: 80}]}
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with running_site(tmp_path_factory.mktemp("access"), 3) as made:
        uuids = [m["uuid"] for m in made.machines]
        made.apply(
            [
                cluster("alpha"),
                machine_set("alpha", "alpha-control-planes", "controlplane", machines=uuids[:1]),
                machine_set("alpha", "alpha-workers", "worker", machines=uuids[2:3]),
                cluster("beta"),
                machine_set("beta", "beta-control-planes", "controlplane", machines=uuids[1:2]),
            ]
        )
        made.wait("cluster", "alpha", timeout=180)
        made.wait("cluster", "beta", timeout=180)
        yield made


def herder(site: Site, *args: str, kubeconfig: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [HERDER, *args, "--kubeconfig", str(kubeconfig)], capture_output=True, text=True, timeout=120
    )
    if check:
        assert result.returncode == 0, f"herder {' '.join(args)}: {result.stdout}{result.stderr}"
    return result


def kubectl(
    kubeconfig: Path, *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def alice(site: Site) -> Path:
    """An identity of role None, labelled into team a: what the policy grants is all it has."""
    config = site.workdir / "alice.kubeconfig"
    site.run(
        "herder", "serviceaccount", "create", "alice", "--role", "None", "--write-kubeconfig", str(config)
    )
    site.run("kubectl", "label", "serviceaccount", "alice", "team=a")
    return config


@pytest.fixture(scope="module")
def policy(site: Site) -> None:
    site.apply([POLICY])


def test_a_policy_whose_tests_fail_is_refused(site: Site) -> None:
    broken = json.loads(json.dumps(POLICY))
    broken["spec"]["tests"][1]["expected"] = {"role": "Reader"}
    path = site.workdir / "broken-policy.yaml"
    path.write_text(yaml.safe_dump(broken))
    refused = site.run("kubectl", "apply", "-f", str(path), check=False)
    assert refused.returncode != 0
    assert "team a has nothing on beta" in refused.stderr
    assert "expected role Reader" in refused.stderr and "got role None" in refused.stderr
    unknown = json.loads(json.dumps(POLICY))
    unknown["spec"]["rules"][0]["clusters"] = ["group/gammas"]
    path.write_text(yaml.safe_dump(unknown))
    refused = site.run("kubectl", "apply", "-f", str(path), check=False)
    assert "no cluster group 'gammas' is defined" in refused.stderr


def test_a_none_identity_sees_and_acts_on_its_cluster_only(site: Site, policy: None, alice: Path) -> None:
    listed = kubectl(alice, "get", "clusters", "-o", "name")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["cluster.herder.dev/alpha"]
    missing = kubectl(alice, "get", "cluster", "beta")
    assert missing.returncode != 0 and "NotFound" in missing.stderr
    sets = kubectl(alice, "get", "machinesets", "-o", "name")
    assert sorted(sets.stdout.split()) == [
        "machineset.herder.dev/alpha-control-planes",
        "machineset.herder.dev/alpha-workers",
    ]
    # Operator on alpha: it may change alpha's objects (and not beta's, which it cannot even name).
    patched = kubectl(alice, "label", "machineset", "alpha-workers", "tier=batch")
    assert patched.returncode == 0, patched.stderr
    other = kubectl(alice, "label", "machineset", "beta-control-planes", "tier=batch")
    assert other.returncode != 0 and "NotFound" in other.stderr
    machines = kubectl(alice, "get", "machines", "-o", "name")
    assert len(machines.stdout.split()) == 2  # alpha's, not beta's
    # A rule on a cluster reaches the cluster's objects only, not a kind of the account's labelled with it.
    grab = (
        "apiVersion: herder.dev/v1alpha1\nkind: MachineClass\n"
        "metadata: {name: mine, namespace: default, labels: {herder.dev/cluster: alpha}}\n"
        "spec: {selector: {matchLabels: {pool: a}}}\n"
    )
    refused = kubectl(alice, "create", "-f", "-", stdin=grab)
    assert refused.returncode != 0 and "Forbidden" in refused.stderr, refused.stderr


def test_through_the_proxy_the_cluster_rbac_decides(site: Site, policy: None, alice: Path) -> None:
    proxied = site.workdir / "alice-alpha.kubeconfig"
    herder(site, "cluster", "kubeconfig", "alpha", "-o", str(proxied), kubeconfig=alice)
    admin = site.workdir / "admin-alpha.kubeconfig"
    herder(site, "cluster", "kubeconfig", "alpha", "-o", str(admin), kubeconfig=site.server.kubeconfig)
    server = yaml.safe_load(proxied.read_text())["clusters"][0]["cluster"]["server"]
    assert server.endswith("/k8s/clusters/default/alpha")
    assert kubectl(admin, "apply", "-f", "-", stdin=READ_ONLY_BINDING + "---\n" + WEB).returncode == 0
    pods = kubectl(proxied, "get", "pods", "-A", "-o", "name")
    assert pods.returncode == 0, pods.stderr
    assert "pod/web" in pods.stdout.split()
    refused = kubectl(proxied, "delete", "pod", "web")
    assert refused.returncode != 0
    assert (
        'pods "web" is forbidden: User "serviceaccount:alice" cannot delete resource "pods"' in refused.stderr
    )
    # beta: 404 through the proxy too.
    beta = proxied.with_name("alice-beta.kubeconfig")
    beta.write_text(proxied.read_text().replace("/default/alpha", "/default/beta"))
    assert "NotFound" in kubectl(beta, "get", "pods").stderr


def test_exec_logs_and_port_forward_pass_through(site: Site, alice: Path) -> None:
    admin = site.workdir / "admin-alpha.kubeconfig"
    assert kubectl(admin, "get", "pod", "web").returncode == 0
    said = kubectl(admin, "exec", "web", "--", "echo", "hello through herder")
    assert said.returncode == 0, said.stderr
    assert said.stdout.strip() == "hello through herder"
    follow = subprocess.Popen(
        [KUBECTL, "--kubeconfig", str(admin), "logs", "-f", "web"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert follow.stdout is not None
        first = follow.stdout.readline()
        assert first, "logs -f printed nothing"
    finally:
        follow.kill()
        follow.wait()
    port = free_port()
    forward = subprocess.Popen(
        [KUBECTL, "--kubeconfig", str(admin), "port-forward", "pod/web", f"{port}:80"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/through", timeout=5)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        assert answer.status_code == 200
        assert "GET /through" in answer.text
    finally:
        forward.kill()
        forward.wait()


def test_revoking_the_token_ends_an_open_watch_and_the_next_request_is_401(site: Site) -> None:
    config = site.workdir / "bob.kubeconfig"
    issued = site.run(
        "herder", "serviceaccount", "create", "bob", "--role", "Reader", "--write-kubeconfig", str(config)
    )
    token = issued.stdout.strip()
    proxied = site.workdir / "bob-alpha.kubeconfig"
    herder(site, "cluster", "kubeconfig", "alpha", "-o", str(proxied), kubeconfig=config)
    watch = subprocess.Popen(
        [KUBECTL, "--kubeconfig", str(proxied), "get", "pods", "-A", "--watch", "--request-timeout=0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert watch.stdout is not None
        assert watch.stdout.readline(), "the watch printed nothing"
        name = token.split("_", 1)[1].rsplit("_", 1)[0]
        site.run("kubectl", "delete", "token", name)
        revoked = time.monotonic()
        watch.wait(timeout=10)
        assert time.monotonic() - revoked < 5.5
    finally:
        watch.kill()
        watch.wait()
    after = kubectl(proxied, "get", "pods")
    assert after.returncode != 0 and "You must be logged in" in after.stderr  # 401


def test_the_talos_gateway_follows_the_role_on_each_cluster(site: Site, policy: None, alice: Path) -> None:
    alpha = site.workdir / "alice-alpha.talosconfig"
    herder(site, "cluster", "talosconfig", "alpha", "-o", str(alpha), kubeconfig=alice)
    refused = herder(
        site, "cluster", "talosconfig", "beta", "-o", str(alpha.with_name("x")), kubeconfig=alice, check=False
    )
    assert refused.returncode != 0 and "NotFound" in refused.stderr
    cp = next(m["node"] for m in site.machines if m["uuid"] == site.machines[0]["uuid"])
    version = subprocess.run(
        [HERDER, "talos", "--talosconfig", str(alpha), "-n", cp, "version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert version.returncode == 0, version.stderr
    # Its Talos role is the one of its role on alpha (Operator), not of its own (None).
    cert = x509.load_pem_x509_certificate(load_talosconfig_file(alpha).current().crt)
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "os:operator"
    ]


def test_who_am_i_and_what_may_i(site: Site, policy: None, alice: Path) -> None:
    who = kubectl(alice, "auth", "whoami", "-o", "json")
    assert who.returncode == 0, who.stderr
    assert json.loads(who.stdout)["status"]["userInfo"]["username"] == "serviceaccount:alice"
    for args, answer in (
        (("patch", "machinesets"), "yes"),  # on some cluster (alpha's)
        (("delete", "clusters/alpha"), "yes"),
        (("delete", "clusters/beta"), "no"),
        (("create", "machineclasses"), "no"),
        (("get", "serviceaccounts"), "no"),
    ):
        said = kubectl(alice, "auth", "can-i", *args)
        assert said.stdout.split()[0] == answer, (args, said.stdout, said.stderr)
    shown = herder(site, "access", "show", "-o", "json", kubeconfig=alice)
    view = json.loads(shown.stdout)
    assert view["role"] == "None"
    assert [(c["name"], c["role"], c["kubernetesGroups"]) for c in view["clusters"]] == [
        ("alpha", "Operator", ["read-only"])
    ]
    assert [r["role"] for r in view["rules"]] == ["Operator"]
    checked = herder(
        site,
        "access",
        "check",
        "--user",
        "serviceaccount:alice",
        "--cluster",
        "beta",
        "-o",
        "json",
        kubeconfig=site.server.kubeconfig,
    )
    assert json.loads(checked.stdout)["clusters"] == [
        {"name": "beta", "role": "None", "kubernetesGroups": []}
    ]
    refused = herder(site, "access", "check", "--user", "serviceaccount:admin", kubeconfig=alice, check=False)
    assert refused.returncode != 0 and "Admin only" in refused.stderr
