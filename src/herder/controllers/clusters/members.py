"""Looking up what belongs to a cluster, by the labels that bind it: its machine sets, their nodes, its
cluster machines, and the Machine behind each."""

from __future__ import annotations

from herder.resources import Resource
from herder.resources.clusters import CLUSTER, CLUSTER_MACHINE, MACHINE_SET, MACHINE_SET_NODE
from herder.resources.machines import CLUSTER_LABEL, MACHINE, MACHINE_SET_LABEL
from herder.runtime.controller import Context, ObjectKey


async def labelled(ctx: Context, kind: str, namespace: str | None, label: str, value: str) -> list[Resource]:
    listed = await ctx.store.list(kind, namespace, label_selector=f"{label}={value}")
    return listed.items


async def cluster_of(ctx: Context, obj: Resource) -> Resource | None:
    """The Cluster an object is labelled with, if it exists."""
    name = obj.metadata.labels.get(CLUSTER_LABEL)
    return await ctx.get(ObjectKey(CLUSTER.kind, obj.namespace, name)) if name else None


async def machine_sets(ctx: Context, cluster: Resource) -> list[Resource]:
    return await labelled(ctx, MACHINE_SET.kind, cluster.namespace, CLUSTER_LABEL, cluster.name)


async def set_nodes(ctx: Context, machine_set: Resource) -> list[Resource]:
    return await labelled(
        ctx, MACHINE_SET_NODE.kind, machine_set.namespace, MACHINE_SET_LABEL, machine_set.name
    )


async def cluster_machines(ctx: Context, cluster: Resource) -> list[Resource]:
    return await labelled(ctx, CLUSTER_MACHINE.kind, cluster.namespace, CLUSTER_LABEL, cluster.name)


async def machine_of(ctx: Context, obj: Resource) -> Resource | None:
    """The Machine named as ``obj`` is (MachineSetNodes and ClusterMachines are named by its UUID)."""
    return await ctx.get(ObjectKey(MACHINE.kind, obj.namespace, obj.name))
