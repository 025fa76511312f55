"""Import: a cluster herder did not make, taken over from its running machines (``herder cluster import``).

The import (the CLI, with the cluster's talosconfig) reads every machine's running config, and creates the
Cluster annotated ``herder.dev/imported`` and ``herder.dev/locked``, its Machines, its static MachineSets and
the ConfigPatches that make herder's configs say what the machines run; then it hands in the secrets
bundle it read back out of a control plane's config (the Cluster's ``import`` action, ``ImportSecrets``),
which becomes the cluster's ClusterSecrets. The sets bind their machines although the cluster is locked
(``machine_set_allocation``), and ``config_apply`` records each machine's config as applied when the
machine runs it already, so nothing is applied and nothing reboots.

This controller tells how far it got on the Cluster's ``Imported`` condition: False while machines are
not taken over (with how many are), True once every listed machine is, and then never again.
"""

from __future__ import annotations

from typing import Any

from herder.controllers.members import cluster_machines
from herder.resources import Resource
from herder.resources.cluster_secrets import CLUSTER_SECRETS
from herder.resources.clusters import (
    CLUSTER,
    CLUSTER_MACHINE,
    MACHINE_SET,
    ClusterMachineStatus,
    ClusterStatus,
    MachineSetSpec,
    is_imported,
)
from herder.resources.machines import CLUSTER_LABEL
from herder.resources.status import status_of
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch, labelled_owner, on_change
from herder.runtime.outputs import Writes
from herder.state.errors import AlreadyExists, NotFound
from herder.state.store import CONTROLLER_ANNOTATION, Store
from herder.talos.contracts import VersionContract
from herder.talos.secrets import InvalidSecrets, dump_secrets, load_secrets

CONDITION = "Imported"


class ImportRefused(Exception):
    """An ``import`` action that cannot be done; ``code`` is the HTTP status to answer."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class ClusterImportController(Controller):
    name = "ClusterImport"
    primary = CLUSTER.kind
    outputs = (Writes(CLUSTER.kind, f"status.conditions[{CONDITION}]"),)
    concurrency = 2
    watches = (
        Watch(CLUSTER.kind),
        Watch(
            CLUSTER_MACHINE.kind, on_change(labelled_owner(CLUSTER.kind, CLUSTER_LABEL), "status.configHash")
        ),
        Watch(MACHINE_SET.kind, labelled_owner(CLUSTER.kind, CLUSTER_LABEL)),
    )

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        cluster = await ctx.get(key)
        if cluster is None or cluster.metadata.deletion_timestamp or not is_imported(cluster):
            return None
        if status_of(cluster, ClusterStatus).condition_true(CONDITION):
            return None  # taken over: what happens afterwards is no part of the import
        listed: set[str] = set()
        for machine_set in await ctx.list(
            MACHINE_SET.kind, key.namespace, label_selector=f"{CLUSTER_LABEL}={cluster.name}"
        ):
            listed.update(MACHINE_SET.spec_of(machine_set, MachineSetSpec).machines or ())
        taken = {
            m.name
            for m in await cluster_machines(ctx, cluster)
            if status_of(m, ClusterMachineStatus).config_hash
        }
        if listed and listed <= taken:
            message = f"herder runs the {len(listed)} machines with the configs they ran; nothing was applied"
            await ctx.condition(cluster, CONDITION, True, "Imported", message, event="Normal")
        else:
            waiting = sorted(listed - taken)
            message = f"{len(listed) - len(waiting)} of {len(listed)} machines taken over" + (
                f"; waiting for {', '.join(waiting[:3])}{'…' if len(waiting) > 3 else ''}" if waiting else ""
            )
            await ctx.condition(cluster, CONDITION, False, "TakingOver", message)
        return None


class ImportSecrets:
    """The Cluster's ``import`` action: the secrets bundle of an imported cluster, read back out of its
    machines' configs, becomes its ClusterSecrets (once; the cluster must be annotated as imported)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def give(self, cluster: Resource, _user: str, _role: str, options: dict[str, Any]) -> bytes:
        if not is_imported(cluster):
            raise ImportRefused(409, f"cluster {cluster.name} is not being imported (herder.dev/imported)")
        bundle_text, contract_text = options.get("bundle"), options.get("talosContract")
        if not isinstance(bundle_text, str) or not bundle_text:
            raise ImportRefused(400, "bundle: required, the secrets bundle in talosctl's secrets YAML format")
        try:
            contract = VersionContract.parse(str(contract_text or ""))
            bundle = load_secrets(bundle_text)
        except InvalidSecrets as exc:
            raise ImportRefused(400, f"bundle: {exc}") from None
        except ValueError as exc:
            raise ImportRefused(400, f"talosContract: {exc}") from None
        info = self._store.registry.get(CLUSTER.kind)
        secrets = Resource.model_validate(
            {
                "apiVersion": CLUSTER_SECRETS.api_version,
                "kind": CLUSTER_SECRETS.kind,
                "metadata": {
                    "name": cluster.name,
                    "namespace": cluster.namespace,
                    # The secrets controller's own, as if it had made them: it keeps them from now on.
                    "annotations": {CONTROLLER_ANNOTATION: "ClusterSecretsController"},
                    "ownerReferences": [
                        {
                            "apiVersion": info.api_version,
                            "kind": CLUSTER.kind,
                            "name": cluster.name,
                            "uid": cluster.metadata.uid or "",
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {"bundle": dump_secrets(bundle), "talosContract": str(contract)},
            }
        )
        try:
            await self._store.create(secrets, actor="ClusterImport")
        except AlreadyExists:
            raise ImportRefused(409, f"cluster {cluster.name} has its secrets already") from None
        except NotFound:
            raise ImportRefused(409, f"cluster {cluster.name} is gone") from None
        return b'{"imported": true}'
