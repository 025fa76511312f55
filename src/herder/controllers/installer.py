"""Which installer image a cluster machine installs (and upgrades) with: the Image Factory image of its
schematic, so that a provisioned machine installs the very image its provider booted.

A machine made for a MachineRequest has that request's schematic; any other machine the cluster's and
its machine set's ``systemExtensions``. A schematic that customizes nothing installs Talos's own image.
"""

from __future__ import annotations

from herder.resources import Resource
from herder.resources.clusters import CLUSTER, MACHINE_SET, ClusterSpec, MachineSetSpec
from herder.resources.machines import CLUSTER_LABEL, MACHINE, MACHINE_SET_LABEL
from herder.resources.provisioning import MACHINE_REQUEST, MACHINE_REQUEST_LABEL, MachineRequestSpec
from herder.resources.schematic import Customization, Schematic, SystemExtensions, installer_image
from herder.runtime.controller import Context, ObjectKey


async def schematic_of(ctx: Context, member: Resource) -> Schematic:
    """The schematic of a ClusterMachine's machine."""
    namespace = member.namespace
    machine = await ctx.get(ObjectKey(MACHINE.kind, namespace, member.name))
    request_name = machine.metadata.labels.get(MACHINE_REQUEST_LABEL) if machine is not None else None
    if request_name:
        request = await ctx.get(ObjectKey(MACHINE_REQUEST.kind, namespace, request_name))
        if request is not None:
            return MACHINE_REQUEST.spec_of(request, MachineRequestSpec).factory_schematic()
    extensions: list[str] = []
    cluster = await ctx.get(ObjectKey(CLUSTER.kind, namespace, member.metadata.labels.get(CLUSTER_LABEL, "")))
    if cluster is not None:
        extensions += CLUSTER.spec_of(cluster, ClusterSpec).system_extensions
    machine_set = await ctx.get(
        ObjectKey(MACHINE_SET.kind, namespace, member.metadata.labels.get(MACHINE_SET_LABEL, ""))
    )
    if machine_set is not None:
        extensions += MACHINE_SET.spec_of(machine_set, MachineSetSpec).system_extensions
    return Schematic(
        customization=Customization(
            systemExtensions=SystemExtensions(officialExtensions=list(dict.fromkeys(extensions)))
        )
    )


async def member_installer(ctx: Context, member: Resource, talos_version: str) -> str:
    """The installer image reference of a ClusterMachine's machine, for ``talos_version``."""
    return installer_image(await schematic_of(ctx, member), talos_version)
