"""Which backup schedule a cluster follows: its own ``spec.backups``, unless the platform enforces one.

This is the hook for managed clusters: their platform's default schedule and retention apply whatever
their users write (and cannot be turned off). The managed control plane work gives ``enforced`` the test
of a managed cluster and ``platform`` the schedule; until then no cluster is enforced.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from herder.resources import Resource
from herder.resources.backups import ClusterBackups
from herder.resources.clusters import CLUSTER, ClusterSpec


def _no_cluster(_: Resource) -> bool:
    return False


@dataclass(frozen=True)
class BackupPolicy:
    platform: ClusterBackups | None = None
    enforced: Callable[[Resource], bool] = _no_cluster

    def schedule(self, cluster: Resource) -> ClusterBackups | None:
        """The schedule of ``cluster``'s backups; None: only backups asked for by hand."""
        if self.platform is not None and self.enforced(cluster):
            return self.platform
        return CLUSTER.spec_of(cluster, ClusterSpec).backups
