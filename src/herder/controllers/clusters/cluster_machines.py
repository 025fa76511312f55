"""Membership: each MachineSetNode becomes a ClusterMachine of the same name, and the Machine is labelled
with its cluster and set while it belongs to them.

The node keeps a finalizer until its ClusterMachine is gone, so the machine's UUID stays taken (no other
set can bind it) until the machine has been torn down and reset. A ClusterMachine starts with the
cluster's versions; afterwards only the version rollout changes them, so it is owned (garbage-collected
with its node) but not locked to this controller: users may change neither, by the policy table.
"""

from __future__ import annotations

from herder.controllers.members import cluster_of
from herder.resources import Resource
from herder.resources.access import read_only_of
from herder.resources.clusters import (
    CLUSTER,
    CLUSTER_MACHINE,
    MACHINE_SET,
    MACHINE_SET_NODE,
    ClusterSpec,
    MachineSetSpec,
)
from herder.resources.machines import CLUSTER_LABEL, MACHINE, MACHINE_SET_LABEL, ROLE_LABEL
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch, on_change, same_name
from herder.runtime.outputs import Owns, Writes

NODE_FINALIZER = "herder.dev/cluster-machine"
TEARDOWN_FINALIZER = "herder.dev/teardown"
MACHINE_LABELS = (CLUSTER_LABEL, MACHINE_SET_LABEL)


class ClusterMachineController(Controller):
    name = "ClusterMachineController"
    primary = MACHINE_SET_NODE.kind
    outputs = (
        Owns(CLUSTER_MACHINE.kind, shared=True),
        Writes(MACHINE_SET_NODE.kind, f"metadata.finalizers[{NODE_FINALIZER}]"),
        Writes(MACHINE.kind, f"metadata.labels[{CLUSTER_LABEL}]", f"metadata.labels[{MACHINE_SET_LABEL}]"),
    )
    concurrency = 4
    watches = (
        Watch(MACHINE_SET_NODE.kind),
        # A member going is what lets its node go.
        Watch(
            CLUSTER_MACHINE.kind, on_change(same_name(MACHINE_SET_NODE.kind), "metadata.deletionTimestamp")
        ),
    )

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        node = await ctx.get(key)
        if node is None:
            return None
        member_key = ObjectKey(CLUSTER_MACHINE.kind, key.namespace, key.name)
        member = await ctx.get(member_key)
        if node.metadata.deletion_timestamp:
            if member is not None:
                if not member.metadata.deletion_timestamp:
                    await ctx.delete(member_key)
                return None  # the teardown controller resets the machine, then lets the member go
            await self._unlabel(ctx, node)
            await ctx.remove_finalizer(node, NODE_FINALIZER)
            return None
        node = await ctx.ensure_finalizer(node, NODE_FINALIZER)
        cluster = await cluster_of(ctx, node)
        machine_set = await ctx.get(
            ObjectKey(MACHINE_SET.kind, key.namespace, node.metadata.labels.get(MACHINE_SET_LABEL, ""))
        )
        if cluster is None or machine_set is None:
            return None
        if member is not None and member.metadata.deletion_timestamp:
            return None  # the machine is still leaving from an earlier membership: wait for it
        role = MACHINE_SET.spec_of(machine_set, MachineSetSpec).role
        labels = {CLUSTER_LABEL: cluster.name, MACHINE_SET_LABEL: machine_set.name, ROLE_LABEL: role}
        if member is None:
            versions = CLUSTER.spec_of(cluster, ClusterSpec)
            await ctx.apply_output(
                node,
                Resource.model_validate(
                    {
                        "apiVersion": CLUSTER_MACHINE.api_version,
                        "kind": CLUSTER_MACHINE.kind,
                        "metadata": {
                            "name": node.name,
                            "namespace": node.namespace,
                            "labels": labels,
                            "annotations": read_only_of(node),
                            "finalizers": [TEARDOWN_FINALIZER],
                        },
                        "spec": {
                            "role": role,
                            "talosVersion": versions.talos_version,
                            "kubernetesVersion": versions.kubernetes_version,
                        },
                    }
                ),
            )
            if node.metadata.controller_ref() is None:
                # Made by hand: nothing else tells that the machine joins. The allocation tells of the
                # nodes it makes (Allocated, on the set), and a second Event of each would be a write.
                await ctx.event(
                    node, "Normal", "Joined", f"machine {node.name} joins cluster {cluster.name} as {role}"
                )
        else:

            def belong(m: Resource) -> None:
                m.metadata.labels.update(labels)
                m.spec = {**(m.spec or {}), "role": role}

            await ctx.mutate(member_key, belong)
        await self._label(ctx, node, cluster.name, machine_set.name)
        return None

    async def _label(self, ctx: Context, node: Resource, cluster: str, machine_set: str) -> None:
        def label(machine: Resource) -> None:
            machine.metadata.labels.update({CLUSTER_LABEL: cluster, MACHINE_SET_LABEL: machine_set})

        await ctx.mutate(ObjectKey(MACHINE.kind, node.namespace, node.name), label)

    async def _unlabel(self, ctx: Context, node: Resource) -> None:
        owner = node.metadata.labels.get(MACHINE_SET_LABEL)

        def unlabel(machine: Resource) -> None:
            if machine.metadata.labels.get(MACHINE_SET_LABEL) == owner:
                for label in MACHINE_LABELS:
                    machine.metadata.labels.pop(label, None)

        await ctx.mutate(ObjectKey(MACHINE.kind, node.namespace, node.name), unlabel)
