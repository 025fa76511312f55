"""Looking up what belongs to a cluster, by the labels that bind it: its machine sets, their nodes, its
cluster machines, and the Machine behind each; and which changes of a Cluster concern a controller."""

from __future__ import annotations

from collections.abc import Iterable

from herder.resources import Resource
from herder.resources.clusters import (
    CLUSTER,
    CLUSTER_MACHINE,
    MACHINE_SET,
    MACHINE_SET_NODE,
    ClusterMachineSpec,
    MachineSetSpec,
    is_import_aborted,
    is_locked,
)
from herder.resources.machines import CLUSTER_LABEL, MACHINE, MACHINE_SET_LABEL, MachineSpec, MachineStatus
from herder.resources.provisioning import MACHINE_REQUEST_SET, MachineRequestSetSpec
from herder.resources.status import status_of
from herder.runtime.controller import Context, Mapper, ObjectKey, on_change, own_key
from herder.runtime.index import FieldIndex
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
        # Its lock (``herder.dev/locked``) among them.
        "metadata.annotations",
        *(f"status.{field}" for field in status),
    )


def lock_changes(mapper: Mapper) -> Mapper:
    """The mapper of a Cluster watch for a controller of the cluster's members that holds back while the
    cluster is locked: only the events that lock or unlock it (mapped to the members by ``mapper``)."""

    def changed(event: WatchEvent) -> Iterable[ObjectKey]:
        if event.type != "MODIFIED" or event.previous is None:
            return ()
        # An aborted import lets its members go although the cluster is locked.
        if (is_locked(event.previous), is_import_aborted(event.previous)) == (
            is_locked(event.object),
            is_import_aborted(event.object),
        ):
            return ()
        return mapper(event)

    return changed


async def locked_cluster(ctx: Context, obj: Resource) -> str:
    """The name of the locked Cluster an object is labelled with ("" when it is not locked, or none):
    what a controller that acts on a cluster's machines asks before it acts."""
    cluster = await cluster_of(ctx, obj)
    return cluster.name if cluster is not None and is_locked(cluster) else ""


def locked_message(cluster: str) -> str:
    """What waits on a locked cluster say."""
    return f"cluster {cluster} is locked (herder.dev/locked): `herder cluster unlock {cluster}` lets it go on"


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


def is_control_plane(member: Resource) -> bool:
    """Whether a ClusterMachine is one of its cluster's control planes."""
    return CLUSTER_MACHINE.spec_of(member, ClusterMachineSpec).role == "controlplane"


async def machine_of(ctx: Context, obj: Resource) -> Resource | None:
    """The Machine named as ``obj`` is (MachineSetNodes and ClusterMachines are named by its UUID)."""
    return await ctx.get(ObjectKey(MACHINE.kind, obj.namespace, obj.name))


def request_set_sources() -> FieldIndex:
    """Which machine set allocates from each MachineRequestSet (``spec.machineRequestSet``), kept from the
    MachineSet watch (``track``), so that a request set's event reaches the set (``by_name()``) whatever
    owns the request set."""
    return FieldIndex(
        MACHINE_SET.kind, lambda obj: MACHINE_SET.spec_of(obj, MachineSetSpec).machine_request_set
    )


async def request_set_count(ctx: Context, machine_set: Resource) -> int | None:
    """How many machines the request set a set allocates from asks for (None: it does not exist)."""
    name = MACHINE_SET.spec_of(machine_set, MachineSetSpec).machine_request_set
    request_set = (
        await ctx.get(ObjectKey(MACHINE_REQUEST_SET.kind, machine_set.namespace, name)) if name else None
    )
    if request_set is None or request_set.metadata.deletion_timestamp:
        return None
    return MACHINE_REQUEST_SET.spec_of(request_set, MachineRequestSetSpec).machine_count


async def control_planes(ctx: Context, cluster: Resource) -> tuple[dict[str, str], dict[str, str]]:
    """Talos endpoint → machine UUID of the cluster's control planes: all of them, and those that run."""
    known: dict[str, str] = {}
    running: dict[str, str] = {}
    for member in await cluster_machines(ctx, cluster):
        if not is_control_plane(member) or member.metadata.deletion_timestamp:
            continue
        machine = await machine_of(ctx, member)
        if machine is None:
            continue
        endpoint = MACHINE.spec_of(machine, MachineSpec).endpoint
        known[endpoint] = machine.name
        if status_of(machine, MachineStatus).running:
            running[endpoint] = machine.name
    return known, running


async def running_control_planes(ctx: Context, cluster: Resource) -> dict[str, str]:
    """Talos endpoint → machine UUID of the cluster's control planes that run."""
    return (await control_planes(ctx, cluster))[1]
