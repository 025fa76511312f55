"""ClusterManifests: each one's objects server-side applied into its cluster's Kubernetes (``manifest_sync``)
with herder's admin credentials, once the cluster is bootstrapped and its API answers, then again at an
interval, which reverts what anyone changed of herder's fields in the cluster (drift; each revert is an
Event). Each sync records ``status.inventory`` and ``status.objects`` and the manifest's ``Ready``; the
Cluster's ``ManifestsApplied`` sums up all of its manifests. A deleted full-mode manifest prunes its
objects before it goes (its finalizer's way out: the cluster itself going, which takes them with it).
A ``herder.dev/sync-requested`` annotation (``herder cluster kubernetes manifest-sync``) syncs now.
"""

from __future__ import annotations

from herder.controllers.cluster_keys import ClusterKeys
from herder.controllers.kubernetes.manifest_sync import Outcome, prune_all, sync
from herder.controllers.kubernetes.workload import WorkloadAPI
from herder.controllers.kubernetes_clients import KubernetesClients
from herder.resources import Resource, now_rfc3339
from herder.resources.clusters import CLUSTER, ClusterSpec, ClusterStatus
from herder.resources.machines import CLUSTER_LABEL
from herder.resources.manifests import (
    CLUSTER_MANIFEST,
    ClusterManifestSpec,
    ClusterManifestStatus,
    ObjectRef,
    describe,
)
from herder.resources.status import status_of
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch
from herder.runtime.outputs import Writes

FINALIZER = "herder.dev/manifest-prune"
RESYNC_EVERY = 60.0
WAIT_EVERY = 5.0
"""Seconds between attempts while the cluster is not ready for its manifests, or a sync failed."""
CONDITION = "ManifestsApplied"


async def workload_api(
    keys: ClusterKeys, clients: KubernetesClients, cluster: Resource
) -> tuple[WorkloadAPI | None, str]:
    """herder's way into a cluster's Kubernetes API, or why there is none yet."""
    status = status_of(cluster, ClusterStatus)
    if not status.bootstrapped:
        return None, "the cluster is not bootstrapped yet"
    endpoint = CLUSTER.spec_of(cluster, ClusterSpec).endpoint or status.endpoint
    if not endpoint:
        return None, "the cluster has no Kubernetes endpoint yet"
    view = await keys.of(cluster)
    if view is None:
        return None, "the cluster's secrets are not made yet"
    return WorkloadAPI(clients.client(endpoint, view.kubernetes), endpoint), ""


class ClusterManifestController(Controller):
    name = "ClusterManifest"
    primary = CLUSTER_MANIFEST.kind
    outputs = (
        Writes(
            CLUSTER_MANIFEST.kind,
            "status.inventory",
            "status.objects",
            "status.lastSyncTime",
            "status.observedGeneration",
            "status.conditions[Ready]",
            f"metadata.finalizers[{FINALIZER}]",
        ),
        Writes(CLUSTER.kind, f"status.conditions[{CONDITION}]"),
    )
    concurrency = 4
    watches = (Watch(CLUSTER_MANIFEST.kind),)

    def __init__(
        self, keys: ClusterKeys, resync_every: float = RESYNC_EVERY, clients: KubernetesClients | None = None
    ) -> None:
        self._keys = keys
        self._resync_every = resync_every
        self._clients = clients or KubernetesClients()
        self._versions: dict[tuple[str, str], dict[ObjectRef, str]] = {}

    async def shutdown(self) -> None:
        await self._clients.close()

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        manifest = await ctx.get(key)
        if manifest is None:
            self._versions.pop((key.namespace or "", key.name), None)
            return None
        spec = CLUSTER_MANIFEST.spec_of(manifest, ClusterManifestSpec)
        cluster_name = manifest.metadata.labels.get(CLUSTER_LABEL, "")
        cluster = (
            await ctx.get(ObjectKey(CLUSTER.kind, manifest.namespace, cluster_name)) if cluster_name else None
        )
        if manifest.metadata.deletion_timestamp:
            return await self._deleting(ctx, manifest, cluster)
        if spec.mode == "full":
            manifest = await ctx.ensure_finalizer(manifest, FINALIZER)
        if cluster is None:
            why = (
                f"label {CLUSTER_LABEL} names no cluster"
                if not cluster_name
                else f"cluster {cluster_name} does not exist"
            )
            await self._ready(ctx, manifest, False, "NoCluster", why)
            return Result(requeue_after=WAIT_EVERY)
        if cluster.metadata.deletion_timestamp:
            return None
        api, why = await workload_api(self._keys, self._clients, cluster)
        if api is None:
            await self._ready(ctx, manifest, False, "WaitingForCluster", why)
            await self._summary(ctx, cluster)
            return Result(requeue_after=WAIT_EVERY)
        status = status_of(manifest, ClusterManifestStatus)
        where = (manifest.namespace or "", manifest.name)
        outcome = await sync(api, spec, status.inventory, self._versions.get(where))
        first_sync = where not in self._versions
        self._versions[where] = outcome.versions
        await self._record(ctx, manifest, outcome)
        if not first_sync and status.observed_generation == (manifest.metadata.generation or 0):
            for ref in outcome.changed:
                await ctx.event(
                    manifest,
                    "Normal",
                    "DriftReverted",
                    f"{describe(ref)} was changed in the cluster; re-applied",
                )
        await self._summary(ctx, cluster)
        return Result(requeue_after=WAIT_EVERY if outcome.failed else self._resync_every)

    async def _record(self, ctx: Context, manifest: Resource, outcome: Outcome) -> None:
        generation = manifest.metadata.generation or 0

        def record(_: Resource, status: ClusterManifestStatus) -> None:
            # What this generation's first sync pruned stays shown: later syncs find nothing to prune.
            new = {r.ref for r in outcome.results}
            earlier = [
                r
                for r in status.objects
                if r.state == "Pruned" and r.ref not in new and status.observed_generation == generation
            ]
            status.inventory = outcome.inventory
            status.objects = [*outcome.results, *earlier]
            status.observed_generation = generation
            status.last_sync_time = now_rfc3339()

        await ctx.mutate_status(ObjectKey.of(manifest), ClusterManifestStatus, record)
        failed = outcome.failed
        if failed:
            first = failed[0]
            message = f"{describe(first.ref)}: {first.message}"
            if len(failed) > 1:
                message += f" (and {len(failed) - 1} more)"
            await self._ready(ctx, manifest, False, "ApplyFailed", message)
        else:
            applied = sum(1 for r in outcome.results if r.state == "Applied")
            pruned = sum(1 for r in outcome.results if r.state == "Pruned")
            message = f"{applied} object(s) applied" + (f", {pruned} pruned" if pruned else "")
            await self._ready(ctx, manifest, True, "Applied", message)

    async def _ready(self, ctx: Context, manifest: Resource, ok: bool, reason: str, message: str) -> None:
        await ctx.condition(manifest, "Ready", ok, reason, message, event="Normal" if ok else "Warning")

    async def _summary(self, ctx: Context, cluster: Resource) -> None:
        """The Cluster's ``ManifestsApplied``: every manifest of it applied, or the first that is not."""
        manifests = await ctx.list(
            CLUSTER_MANIFEST.kind, cluster.namespace, label_selector=f"{CLUSTER_LABEL}={cluster.name}"
        )
        pending = []
        for manifest in sorted(manifests, key=lambda m: m.name):
            ready = status_of(manifest, ClusterManifestStatus).condition("Ready")
            if ready is None or ready.status != "True":
                pending.append(f"{manifest.name}: {ready.message if ready is not None else 'not synced yet'}")
        if pending:
            await ctx.condition(cluster, CONDITION, False, "NotApplied", "; ".join(pending))
        else:
            await ctx.condition(cluster, CONDITION, True, "Applied", f"{len(manifests)} manifest(s) applied")

    async def _deleting(self, ctx: Context, manifest: Resource, cluster: Resource | None) -> Result | None:
        if FINALIZER not in manifest.metadata.finalizers:
            return None
        status = status_of(manifest, ClusterManifestStatus)
        if cluster is not None and not cluster.metadata.deletion_timestamp and status.inventory:
            api, why = await workload_api(self._keys, self._clients, cluster)
            if api is None:
                await self._ready(ctx, manifest, False, "WaitingToPrune", why)
                return Result(requeue_after=WAIT_EVERY)
            results = await prune_all(api, status.inventory)
            failed = [r for r in results if r.state == "Failed"]
            if failed:
                await self._ready(
                    ctx, manifest, False, "PruneFailed", f"{describe(failed[0].ref)}: {failed[0].message}"
                )
                return Result(requeue_after=WAIT_EVERY)
            for result in results:
                await ctx.event(manifest, "Normal", "Pruned", f"{describe(result.ref)}: {result.message}")
        await ctx.remove_finalizer(manifest, FINALIZER)
        if cluster is not None and not cluster.metadata.deletion_timestamp:
            await self._summary(ctx, cluster)
        return None
