"""Objects of etcd backups for controller unit tests: a bootstrapped cluster whose one control plane runs
etcd on a fake machine, its backup stores in a folder, and backups already taken."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from herder.controllers.backups.stores import BackupStores
from herder.controllers.cluster_keys import ClusterKeys
from herder.resources import Resource
from tests.controllers.provisioned import TALOS
from tests.controllers.site import Site, obj

CLUSTER = {"herder.dev/cluster": "alpha"}
ENDPOINT = "127.0.0.7:50000"


def cluster(**spec: Any) -> Resource:
    return obj("Cluster", "alpha", spec={"talosVersion": TALOS, "kubernetesVersion": "1.33.0", **spec})


async def running_cluster(site: Site, *, etcd_healthy: bool = True, **spec: Any) -> Resource:
    """A cluster bootstrapped on its one control plane ``cp1``, which runs etcd (healthy, as the cluster's
    ``EtcdHealthy`` condition says, unless ``etcd_healthy`` is False); the cluster as it is."""
    (made,) = await site.create(cluster(**spec))
    await site.cluster_secrets(made)
    (machine,) = await site.create(obj("Machine", "cp1", spec={"endpoint": ENDPOINT}))
    await site.set_status(machine, connected=True, stage="Running")
    (member,) = await site.create(
        obj(
            "ClusterMachine",
            "cp1",
            spec={"role": "controlplane", "talosVersion": TALOS, "kubernetesVersion": "1.33.0"},
            metadata={"labels": CLUSTER},
        )
    )
    await site.set_status(member, etcdMember=True)
    stamp = site.clock.rfc3339()
    healthy = {"type": "EtcdHealthy", "status": "True" if etcd_healthy else "False", "reason": "Healthy"}
    return await site.set_status(
        made,
        bootstrap={"machine": "cp1", "requestedAt": stamp, "completedAt": stamp},
        conditions=[{**healthy, "message": "", "lastTransitionTime": stamp}],
    )


def stores(site: Site, folder: Path) -> BackupStores:
    return BackupStores(site.store, folder)


def keys(site: Site) -> ClusterKeys:
    return ClusterKeys(site.store)


def backup(name: str, cluster_uuid: str, taken_at: str, **labels: str) -> Resource:
    return obj(
        "EtcdBackup",
        name,
        spec={
            "clusterUUID": cluster_uuid,
            "snapshot": f"{name}.snapshot",
            "size": 1,
            "store": "default",
            "checksum": "sha256:00",
            "takenAt": taken_at,
        },
        metadata={"labels": {**CLUSTER, **labels}},
    )
