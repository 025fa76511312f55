"""Prometheus metrics of etcd backups, per cluster: the age of the newest backup (computed when scraped, so
an alert on it fires while backups silently stop) and the failed attempts."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from prometheus_client import REGISTRY, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

BACKUP_FAILURES = Counter(
    "herder_etcd_backup_failures_total", "etcd backup attempts that failed", ["namespace", "cluster"]
)
BACKUPS_TAKEN = Counter("herder_etcd_backups_total", "etcd backups taken", ["namespace", "cluster"])


class NewestBackupAge(Collector):
    """``herder_etcd_backup_age_seconds``: seconds since each cluster's newest backup was taken."""

    def __init__(self) -> None:
        self._newest: dict[tuple[str, str], float] = {}

    def taken(self, namespace: str, cluster: str, at: float) -> None:
        self._newest[(namespace, cluster)] = at

    def forget(self, namespace: str, cluster: str) -> None:
        self._newest.pop((namespace, cluster), None)
        for counter in (BACKUP_FAILURES, BACKUPS_TAKEN):
            with contextlib.suppress(KeyError):
                counter.remove(namespace, cluster)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "herder_etcd_backup_age_seconds",
            "Seconds since the newest etcd backup of a cluster was taken",
            labels=["namespace", "cluster"],
        )
        now = time.time()
        for (namespace, cluster), at in sorted(self._newest.items()):
            family.add_metric([namespace, cluster], max(0.0, now - at))
        yield family


NEWEST_BACKUP_AGE = NewestBackupAge()
REGISTRY.register(NEWEST_BACKUP_AGE)
