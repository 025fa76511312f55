"""A plain ``herder serve`` (no ``--cluster-endpoints``) serves the Kubernetes API of a cluster without
``spec.endpoint``, as the README's first example has it: it has a default range of addresses for its load
balancers (the listen host, ports below the ephemeral ones), says so at start-up, and the cluster becomes
Ready behind one of them."""

from __future__ import annotations

import subprocess
from pathlib import Path
from urllib.parse import urlsplit

from tests.api.server import KUBECTL
from tests.clusters.site import cluster, machine_set, running_site


def test_a_cluster_without_an_endpoint_becomes_ready_on_a_plain_serve(tmp_path: Path) -> None:
    with running_site(tmp_path, 1, cluster_endpoints=False) as site:
        assert "cluster endpoints: 127.0.0.1:10000-10999" in site.server.log.read_text()
        uuid = site.machines[0]["uuid"]
        site.apply(
            [cluster("plain"), machine_set("plain", "plain-control-planes", "controlplane", machines=[uuid])]
        )
        site.wait("cluster", "plain", timeout=120)
        endpoint = urlsplit(site.get("cluster", "plain")["status"]["endpoint"])
        assert endpoint.hostname == "127.0.0.1" and endpoint.port is not None
        assert 10000 <= endpoint.port <= 10999
        # The cluster's own kubeconfig reaches its API through that balancer.
        kubeconfig = site.workdir / "plain.kubeconfig"
        site.run("herder", "cluster", "kubeconfig", "plain", "-o", str(kubeconfig))
        nodes = subprocess.run(
            [KUBECTL, "--kubeconfig", str(kubeconfig), "get", "nodes", "--no-headers"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert nodes.returncode == 0 and len(nodes.stdout.splitlines()) == 1, nodes.stderr
