"""Prometheus metrics of the controller runtime (the store counts its own writes)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECONCILES = Counter("herder_reconcile_total", "Reconciles run", ["controller", "result"])
RECONCILE_ERRORS = Counter("herder_reconcile_errors_total", "Reconciles that raised", ["controller"])
RECONCILE_SECONDS = Histogram(
    "herder_reconcile_duration_seconds",
    "Time spent in one reconcile",
    ["controller"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30),
)
QUEUE_DEPTH = Gauge("herder_workqueue_depth", "Keys waiting in a controller's work queue", ["controller"])
IS_LEADER = Gauge("herder_leader", "1 while this process runs the controllers (of one shard at least)")
SHARD_HELD = Gauge("herder_shard_held", "1 for each shard whose controllers this process runs", ["shard"])
SKIPPED = Counter(
    "herder_reconcile_skipped_total",
    "Keys not reconciled here: their shard is another replica's",
    ["controller"],
)
