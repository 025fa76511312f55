"""A cluster's secrets bundle, generated once: ClusterSecrets (owned by the Cluster, sealed at rest).

The bundle's version contract is the one of the Talos version the cluster is created with, and it is
never changed afterwards, so an upgrade never rewrites the config format under a running machine. The
contract and that first version are also shown on the Cluster's status.
"""

from __future__ import annotations

import asyncio

from herder.controllers.clusters.key_pool import KeyPool
from herder.resources import Resource
from herder.resources.cluster_secrets import CLUSTER_SECRETS, ClusterSecretsSpec
from herder.resources.clusters import CLUSTER, ClusterSpec, ClusterStatus
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch, controller_owner
from herder.runtime.outputs import Owns, Writes
from herder.talos.contracts import VersionContract
from herder.talos.secrets import dump_secrets, generate_secrets, service_account_key_type


class ClusterSecretsController(Controller):
    name = "ClusterSecretsController"
    primary = "Cluster"
    outputs = (
        Owns("ClusterSecrets"),
        Writes("Cluster", "status.talosContract", "status.initialTalosVersion"),
    )
    concurrency = 4
    watches = (Watch("Cluster"), Watch("ClusterSecrets", controller_owner("Cluster")))

    def __init__(self, keys: KeyPool, *, make_keys_now: bool = False) -> None:
        self._keys = keys
        self._make_keys_now = make_keys_now

    def started(self) -> None:
        if self._make_keys_now:
            self._keys.start()

    async def shutdown(self) -> None:
        await self._keys.stop()

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        cluster = await ctx.get(key)
        if cluster is None or cluster.metadata.deletion_timestamp:
            return None
        stored = await ctx.get(ObjectKey(CLUSTER_SECRETS.kind, key.namespace, key.name))
        if stored is None:
            spec = CLUSTER.spec_of(cluster, ClusterSpec)
            contract = VersionContract.parse(spec.talos_version)
            made_ahead = None
            if service_account_key_type(contract) is self._keys.key_type:
                made_ahead = await self._keys.take()
            bundle = await asyncio.to_thread(generate_secrets, contract, service_account_key=made_ahead)
            stored = await ctx.apply_output(
                cluster,
                Resource.model_validate(
                    {
                        "apiVersion": CLUSTER_SECRETS.api_version,
                        "kind": CLUSTER_SECRETS.kind,
                        "metadata": {"name": cluster.name, "namespace": cluster.namespace},
                        "spec": {"bundle": dump_secrets(bundle), "talosContract": str(contract)},
                    }
                ),
            )
            await ctx.event(cluster, "Normal", "SecretsGenerated", f"generated for Talos contract {contract}")
        fixed = CLUSTER_SECRETS.spec_of(stored, ClusterSecretsSpec).talos_contract
        talos = CLUSTER.spec_of(cluster, ClusterSpec).talos_version

        def record(_: Resource, status: ClusterStatus) -> None:
            status.talos_contract = fixed
            status.initial_talos_version = status.initial_talos_version or talos

        await ctx.mutate_status(key, ClusterStatus, record)
        return None
