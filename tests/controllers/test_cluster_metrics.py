"""The metrics on-call alerts use, as computed from the store at a scrape: a cluster's readiness, its etcd
quorum, its unreachable machines (not those powered off on purpose), its backups and rollouts, a
provider's heartbeat, and when the cluster's CAs and herder's own certificates expire."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509

from herder.controllers.backups.policy import managed_policy
from herder.controllers.observability.cluster_metrics import ClusterMetrics
from herder.talos.secrets import load_secrets
from tests.controllers.site import Site, obj, secrets_bundle

CLUSTER = {"herder.dev/cluster": "alpha"}


@pytest.fixture
def site(sealed_site: Site) -> Site:
    return sealed_site  # the cluster's secrets are sealed


def samples(metrics: ClusterMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in metrics.collect()
        for s in family.samples
    }


def value(
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


async def test_a_clusters_health_is_exported_as_the_store_has_it(site: Site, tmp_path: Path) -> None:
    (cluster,) = await site.create(
        obj(
            "Cluster",
            "alpha",
            spec={"talosVersion": "v1.13.0", "kubernetesVersion": "1.33.0", "backups": {"interval": "1h"}},
        )
    )
    await site.set_status(
        cluster,
        phase="Running",
        conditions=[{"type": "Ready", "status": "True", "reason": "Ready", "message": ""}],
        bootstrap={"machine": "m1", "requestedAt": "2026-01-01T00:00:00Z"},
        backups={"lastSuccessTime": "2026-01-01T00:00:00Z", "failures": 2},
        rollouts=[
            {"kind": "Talos", "target": "v1.13.1", "done": 1, "total": 3, "state": "Rolling"},
            {
                "kind": "Kubernetes",
                "target": "1.33.1",
                "done": 0,
                "total": 3,
                "state": "Stopped",
                "message": "m2 failed",
            },
        ],
    )
    await site.cluster_secrets(cluster)
    (plane,) = await site.create(obj("ControlPlaneStatus", "alpha"))
    await site.set_status(
        plane,
        etcd={
            "members": [
                {"machine": "m1", "id": "1", "healthy": True},
                {"machine": "m2", "id": "2", "healthy": True},
                {"machine": "m3", "id": "3", "healthy": False},
            ]
        },
    )
    (provider,) = await site.create(obj("InfraProvider", "emu", namespaced=False, spec={}))
    await site.set_status(
        provider,
        lastHeartbeat="2026-01-01T00:00:10Z",
        heartbeatIntervalSeconds=10,
        capabilities={"power": True},
    )
    for name, status, spec in (
        ("m1", {"connected": True, "stage": "Running"}, {}),
        ("m2", {"connected": False, "stage": "Unreachable"}, {}),
        ("m3", {"connected": False, "stage": "PoweredOff"}, {"power": {"on": False}}),
    ):
        (made,) = await site.create(
            obj(
                "Machine",
                name,
                spec={"endpoint": "127.0.0.1:50000", **spec},
                metadata={"labels": {**CLUSTER, "herder.dev/infra-provider-id": "emu"}},
            )
        )
        await site.set_status(made, **status)
    own = tmp_path / "tls.crt"
    own.write_bytes(load_secrets(secrets_bundle("1.13"), check_keys=False).k8s.crt)

    metrics = ClusterMetrics(site.store, managed_policy(), [("herder-api", own)])
    await metrics.refresh()
    found = samples(metrics)
    where = {"namespace": "default", "cluster": "alpha"}
    assert value(found, "herder_cluster_ready", **where) == 1
    info = {
        **where,
        "phase": "Running",
        "talos_version": "v1.13.0",
        "kubernetes_version": "1.33.0",
        "managed": "false",
    }
    assert value(found, "herder_cluster_info", **info) == 1
    # Two of three healthy: a quorum, and no failure to spare.
    assert value(found, "herder_cluster_etcd_quorum_lost", **where) == 0
    assert value(found, "herder_cluster_etcd_quorum_at_risk", **where) == 1
    assert value(found, "herder_cluster_machines", **where) == 3
    assert value(found, "herder_cluster_machines_unreachable", **where) == 1  # m3 is off on purpose
    assert value(found, "herder_cluster_backup_interval_seconds", **where) == 3600
    assert value(found, "herder_cluster_backup_last_success_timestamp_seconds", **where) == 1767225600
    assert value(found, "herder_cluster_backup_failures", **where) == 2
    assert value(found, "herder_cluster_rollout_machines", **where, kind="Talos") == 3
    assert value(found, "herder_cluster_rollout_machines_done", **where, kind="Talos") == 1
    assert value(found, "herder_cluster_rollout_stopped", **where, kind="Talos") == 0
    assert value(found, "herder_cluster_rollout_stopped", **where, kind="Kubernetes") == 1
    assert value(found, "herder_infra_provider_ready", provider="emu") == 0
    assert value(found, "herder_infra_provider_heartbeat_timestamp_seconds", provider="emu") == 1767225610
    assert value(found, "herder_infra_provider_heartbeat_interval_seconds", provider="emu") == 10
    bundle = load_secrets(secrets_bundle("1.13"), check_keys=False)
    for certificate, pem in (
        ("talos", bundle.os.crt),
        ("kubernetes", bundle.k8s.crt),
        ("etcd", bundle.etcd.crt),
    ):
        expiry = x509.load_pem_x509_certificate(pem).not_valid_after_utc.timestamp()
        assert (
            value(found, "herder_certificate_expiry_timestamp_seconds", **where, certificate=certificate)
            == expiry
        )
    assert value(
        found,
        "herder_certificate_expiry_timestamp_seconds",
        namespace="",
        cluster="",
        certificate="herder-api",
    )

    # A member more unhealthy: the quorum is lost. The cluster goes: so do its numbers.
    await site.set_status(
        plane,
        etcd={
            "members": [
                {"machine": "m1", "id": "1", "healthy": True},
                {"machine": "m2", "id": "2"},
                {"machine": "m3", "id": "3"},
            ]
        },
    )
    await metrics.refresh()
    assert value(samples(metrics), "herder_cluster_etcd_quorum_lost", **where) == 1
    await site.store.delete("Cluster", "alpha", "default")
    await metrics.refresh()
    assert value(samples(metrics), "herder_cluster_ready", **where) is None


async def test_a_single_member_control_plane_is_not_at_risk_by_choice(site: Site) -> None:
    (cluster,) = await site.create(
        obj("Cluster", "xs", spec={"talosVersion": "v1.13.0", "kubernetesVersion": "1.33.0"})
    )
    await site.set_status(cluster, bootstrap={"machine": "m1", "requestedAt": "2026-01-01T00:00:00Z"})
    (plane,) = await site.create(obj("ControlPlaneStatus", "xs"))
    await site.set_status(plane, etcd={"members": [{"machine": "m1", "id": "1", "healthy": True}]})
    metrics = ClusterMetrics(site.store, managed_policy())
    await metrics.refresh()
    found = samples(metrics)
    assert value(found, "herder_cluster_etcd_quorum_at_risk", namespace="default", cluster="xs") == 0
    assert value(found, "herder_cluster_ready", namespace="default", cluster="xs") == 0
    assert value(found, "herder_cluster_backup_interval_seconds", namespace="default", cluster="xs") is None
