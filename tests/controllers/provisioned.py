"""Objects of provisioning for controller unit tests: a provider, its request sets and requests, and the
status a provider reports on a request."""

from __future__ import annotations

from typing import Any

from herder.resources import Resource
from tests.controllers.site import Site, obj

PROVIDER = "emu"
TALOS = "v1.13.9"
CLUSTER_LABEL = "herder.dev/cluster"
SET_LABEL = "herder.dev/machine-set"


def provider(name: str = PROVIDER, **spec: Any) -> Resource:
    return obj("InfraProvider", name, namespaced=False, spec=spec)


def request(name: str, provider_id: str = PROVIDER, **metadata: Any) -> Resource:
    return obj(
        "MachineRequest",
        name,
        spec={"providerID": provider_id, "talosVersion": TALOS},
        metadata=metadata,
    )


def request_set(name: str, count: int, provider_id: str = PROVIDER, **metadata: Any) -> Resource:
    return obj(
        "MachineRequestSet",
        name,
        spec={"providerID": provider_id, "talosVersion": TALOS, "machineCount": count},
        metadata=metadata,
    )


async def reported(site: Site, target: Resource, uuid: str, address: str = "", **status: Any) -> Resource:
    """The request as its provider reports it Provisioned with machine ``uuid`` at ``address``."""
    machine = {"uuid": uuid, **({"address": address} if address else {})}
    return await site.set_status(target, stage="Provisioned", machine=machine, **status)


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or () if c["type"] == kind), {})


async def workers(site: Site) -> Resource:
    """Cluster ``alpha`` and its machine set ``workers``, whose machines are bound by hand: the set."""
    await site.create(obj("Cluster", "alpha", spec={"talosVersion": TALOS, "kubernetesVersion": "1.33.0"}))
    (made,) = await site.create(
        obj("MachineSet", "workers", spec={"role": "worker"}, metadata={"labels": {CLUSTER_LABEL: "alpha"}})
    )
    return made


async def bound(site: Site, uuid: str, endpoint: str = "") -> Resource:
    """Machine ``uuid`` (made at ``endpoint``, unless it exists) bound to ``workers``: its node."""
    if endpoint:
        await site.create(obj("Machine", uuid, spec={"endpoint": endpoint}))
    (node,) = await site.create(
        obj("MachineSetNode", uuid, metadata={"labels": {CLUSTER_LABEL: "alpha", SET_LABEL: "workers"}})
    )
    return node
