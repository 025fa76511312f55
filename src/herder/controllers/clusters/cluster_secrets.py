"""A cluster's secrets bundle, generated once: ClusterSecrets (owned by the Cluster, sealed at rest).

The bundle's version contract is the one of the Talos version the cluster is created with, and it is
never changed afterwards, so an upgrade never rewrites the config format under a running machine. The
contract and that first version are also shown on the Cluster's status. An imported cluster
(``herder.dev/imported``) gets none generated: its bundle is the one its machines run, which the import
gives (``cluster_import``).

A cluster restored from an etcd backup (its control plane set's ``bootstrapSpec``) runs with the backup's
Kubernetes encryption secrets instead of its own, so that the Secrets in the snapshot read back: they are
put into its bundle (``restoredFrom`` names the backup) before etcd is bootstrapped, and no config of it
is made before (``cluster_machine_config``). A backup that carries none (an older herder's) is told of.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Literal

from herder.controllers.backups.encryption_secrets import SecretsUnreadable
from herder.controllers.backups.restore import backup_encryption_secrets, bootstrap_spec, restored_from
from herder.controllers.clusters.key_pool import KeyPool
from herder.resources import Resource
from herder.resources.cluster_secrets import CLUSTER_SECRETS, ClusterSecretsSpec
from herder.resources.clusters import CLUSTER, MACHINE_SET, ClusterSpec, ClusterStatus, is_imported
from herder.resources.machines import CLUSTER_LABEL
from herder.resources.status import status_of
from herder.runtime.controller import (
    Context,
    Controller,
    ObjectKey,
    Result,
    Watch,
    controller_owner,
    labelled_owner,
    on_change,
)
from herder.runtime.outputs import Owns, Writes
from herder.talos.contracts import VersionContract
from herder.talos.secrets import dump_secrets, generate_secrets, load_secrets, service_account_key_type


class ClusterSecretsController(Controller):
    name = "ClusterSecretsController"
    primary = "Cluster"
    outputs = (
        Owns("ClusterSecrets"),
        # The bundle is also the rotation's to change (SecretsRotation): a restored cluster's encryption
        # secrets go into it once, before any config is made from it.
        Writes("ClusterSecrets", "spec.bundle", "spec.restoredFrom"),
        Writes("Cluster", "status.talosContract", "status.initialTalosVersion"),
    )
    concurrency = 4
    watches = (
        Watch("Cluster"),
        Watch("ClusterSecrets", controller_owner("Cluster")),
        # A control plane set naming a backup to restore from.
        Watch(MACHINE_SET.kind, on_change(labelled_owner(CLUSTER.kind, CLUSTER_LABEL), "spec")),
    )

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
        if stored is None and is_imported(cluster):
            return None  # the import brings the bundle its machines run; its creation brings us back
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
        stored = await self._restoring(ctx, cluster, stored)
        fixed = CLUSTER_SECRETS.spec_of(stored, ClusterSecretsSpec).talos_contract
        talos = CLUSTER.spec_of(cluster, ClusterSpec).talos_version

        def record(_: Resource, status: ClusterStatus) -> None:
            status.talos_contract = fixed
            status.initial_talos_version = status.initial_talos_version or talos

        await ctx.mutate_status(key, ClusterStatus, record)
        return None

    async def _restoring(self, ctx: Context, cluster: Resource, stored: Resource) -> Resource:
        """A cluster about to be restored from a backup takes the backup's encryption secrets."""
        spec = await bootstrap_spec(ctx, cluster)
        current = CLUSTER_SECRETS.spec_of(stored, ClusterSecretsSpec)
        if spec is None or status_of(cluster, ClusterStatus).bootstrapped:
            return stored
        source = restored_from(spec)
        if current.restored_from == source:
            return stored
        try:
            carried = await backup_encryption_secrets(ctx, cluster.namespace, spec)
        except SecretsUnreadable as exc:
            carried = None
            await ctx.event(cluster, "Warning", "EncryptionSecretsUnreadable", f"{source}: {exc}")
        bundle = load_secrets(current.bundle, check_keys=False)
        level: Literal["Normal", "Warning"] = "Normal"
        reason, message = (
            "EncryptionSecretsRestored",
            f"the encryption secrets of backup {source} are the cluster's",
        )
        if carried is not None:
            bundle = dataclasses.replace(
                bundle, secretbox_encryption_secret=carried.secretbox, aescbc_encryption_secret=carried.aescbc
            )
        else:
            level, reason = "Warning", "NoEncryptionSecrets"
            message = (
                f"backup {source} carries no encryption secrets (or is not there): Secrets encrypted at rest in "
                "it will not read back"
            )
        taken = current.model_copy(update={"bundle": dump_secrets(bundle), "restored_from": source})

        def take(obj: Resource) -> None:
            obj.spec = taken.model_dump(mode="json", by_alias=True)

        updated = await ctx.mutate(ObjectKey.of(stored), take)
        await ctx.event(cluster, level, reason, message)
        return updated if updated is not None else stored
