"""Which backup schedule a cluster follows: its own ``spec.backups``, unless the platform enforces one.

Managed clusters follow the platform's schedule and retention (``herder serve --managed-backups``)
whatever their users write, and cannot turn it off: the platform runs their control planes, so keeping
their etcd safe is the platform's job too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from herder.resources import Resource
from herder.resources.backups import ClusterBackups
from herder.resources.clusters import CLUSTER, ClusterSpec


def _no_cluster(_: Resource) -> bool:
    return False


def managed(cluster: Resource) -> bool:
    """Whether the platform runs the cluster's control plane."""
    return CLUSTER.spec_of(cluster, ClusterSpec).managed is not None


@dataclass(frozen=True)
class BackupPolicy:
    platform: ClusterBackups | None = None
    enforced: Callable[[Resource], bool] = _no_cluster

    def schedule(self, cluster: Resource) -> ClusterBackups | None:
        """The schedule of ``cluster``'s backups; None: only backups asked for by hand."""
        if self.platform is not None and self.enforced(cluster):
            return self.platform
        return CLUSTER.spec_of(cluster, ClusterSpec).backups


MANAGED_BACKUPS = ClusterBackups(interval="1h", retention=24)
"""The platform's schedule of managed clusters' backups unless ``herder serve --managed-backups`` says."""


def managed_policy(schedule: ClusterBackups = MANAGED_BACKUPS) -> BackupPolicy:
    """Managed clusters on ``schedule``; other clusters on their own."""
    return BackupPolicy(schedule, managed)
