"""Looking up what a MachineRequest stands for: the machine its provider reported, and whether a cluster
uses that machine now."""

from __future__ import annotations

from herder.resources import Resource
from herder.resources.clusters import MACHINE_SET_NODE
from herder.resources.machines import MACHINE, ROLE_LABEL
from herder.resources.provisioning import MachineRequestStatus
from herder.resources.status import status_of
from herder.runtime.controller import Context, ObjectKey


def request_status(request: Resource) -> MachineRequestStatus:
    return status_of(request, MachineRequestStatus)


def reported_uuid(request: Resource) -> str:
    """The UUID of the machine the request's provider reported (empty until it does)."""
    return request_status(request).uuid


async def machine_of_request(ctx: Context, request: Resource) -> Resource | None:
    uuid = reported_uuid(request)
    return await ctx.get(ObjectKey(MACHINE.kind, request.namespace, uuid)) if uuid else None


async def node_of_request(ctx: Context, request: Resource) -> Resource | None:
    """The MachineSetNode binding the request's machine to a machine set, if one does."""
    uuid = reported_uuid(request)
    return await ctx.get(ObjectKey(MACHINE_SET_NODE.kind, request.namespace, uuid)) if uuid else None


def role_of(node: Resource | None) -> str:
    return node.metadata.labels.get(ROLE_LABEL, "") if node is not None else ""


def in_use(node: Resource | None) -> bool:
    """Whether a machine set holds the machine (and is not letting it go)."""
    return node is not None and not node.metadata.deletion_timestamp
