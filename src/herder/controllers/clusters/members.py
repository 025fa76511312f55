"""Looking up what belongs to a cluster, by the labels that bind it: its machine sets, their nodes, its
cluster machines, and the Machine behind each; and which changes of a Cluster concern a controller."""

from __future__ import annotations

from collections.abc import Iterable

from herder.resources import Resource
from herder.resources.clusters import CLUSTER, CLUSTER_MACHINE, MACHINE_SET, MACHINE_SET_NODE
from herder.resources.machines import CLUSTER_LABEL, MACHINE, MACHINE_SET_LABEL, MachineSpec
from herder.runtime.controller import Context, Mapper, ObjectKey, on_change, own_key
from herder.state.store import WatchEvent


def cluster_changes(*status: str, mapper: Mapper = own_key) -> Mapper:
    """The mapper of a Cluster watch for a controller that reads a cluster's spec and metadata and, of its
    status, only the fields ``status`` names: the status that other controllers keep writing (phase,
    machine counts, conditions) does not wake it."""
    return on_change(
        mapper,
        "spec",
        "metadata.generation",
        "metadata.deletionTimestamp",
        "metadata.finalizers",
        "metadata.labels",
        *(f"status.{field}" for field in status),
    )


async def labelled(ctx: Context, kind: str, namespace: str | None, label: str, value: str) -> list[Resource]:
    return await ctx.list(kind, namespace, label_selector=f"{label}={value}")


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


class RequestSetSources:
    """Which machine set allocates from each MachineRequestSet (``spec.machineRequestSet``), kept from the
    MachineSet watch, so that a request set's event reaches the set whatever owns the request set."""

    def __init__(self) -> None:
        self._sets: dict[tuple[str | None, str], ObjectKey] = {}

    def track(self, event: WatchEvent) -> Iterable[ObjectKey]:
        """The MachineSet watch's mapper: keeps the index, and reconciles the set."""
        key = ObjectKey.of(event.object)
        source = (event.object.spec or {}).get("machineRequestSet")
        if source and event.type != "DELETED":
            self._sets[(key.namespace, str(source))] = key
        return (key,)

    def users(self, event: WatchEvent) -> Iterable[ObjectKey]:
        """The MachineRequestSet watch's mapper: the set allocating from it."""
        key = self._sets.get((event.object.namespace, event.object.name))
        return (key,) if key is not None else ()


async def request_set_count(ctx: Context, machine_set: Resource) -> int | None:
    """How many machines the request set a set allocates from asks for (None: it does not exist)."""
    name = (machine_set.spec or {}).get("machineRequestSet")
    request_set = (
        await ctx.get(ObjectKey("MachineRequestSet", machine_set.namespace, str(name))) if name else None
    )
    if request_set is None or request_set.metadata.deletion_timestamp:
        return None
    return int((request_set.spec or {}).get("machineCount") or 0)


async def control_planes(ctx: Context, cluster: Resource) -> tuple[dict[str, str], dict[str, str]]:
    """Talos endpoint → machine UUID of the cluster's control planes: all of them, and those that run."""
    known: dict[str, str] = {}
    running: dict[str, str] = {}
    for member in await cluster_machines(ctx, cluster):
        if (member.spec or {}).get("role") != "controlplane" or member.metadata.deletion_timestamp:
            continue
        machine = await machine_of(ctx, member)
        if machine is None:
            continue
        endpoint = MACHINE.spec_of(machine, MachineSpec).endpoint
        known[endpoint] = machine.name
        mstatus = machine.status or {}
        if mstatus.get("connected") and mstatus.get("stage") == "Running":
            running[endpoint] = machine.name
    return known, running


async def running_control_planes(ctx: Context, cluster: Resource) -> dict[str, str]:
    """Talos endpoint → machine UUID of the cluster's control planes that run."""
    return (await control_planes(ctx, cluster))[1]
