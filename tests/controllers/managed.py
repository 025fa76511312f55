"""Objects of managed control planes for controller unit tests: a hidden provider offering sizes, and a
cluster asking for one."""

from __future__ import annotations

from typing import Any

from herder.resources import Resource
from tests.controllers.provisioned import TALOS, provider
from tests.controllers.site import Site, obj

HIDDEN = "herder-emu"
OFFER: dict[str, Any] = {
    "sizes": {"xs": {"machines": 1, "providerData": {"cpus": 2}}, "s": {"machines": 3}},
    "talosVersions": [TALOS],
    "registerNodes": False,
}


def offering_provider(offer: dict[str, Any] | None = None) -> Resource:
    """The platform's hidden provider, offering managed control planes as ``emu``."""
    return provider(HIDDEN, hidden=True, managedControlPlanes=offer or OFFER)


def managed_cluster(name: str = "alpha", size: str = "xs") -> Resource:
    return obj(
        "Cluster",
        name,
        spec={
            "talosVersion": TALOS,
            "kubernetesVersion": "1.33.0",
            "controlPlane": {"managed": {"enabled": True, "provider": "emu", "size": size}},
        },
    )


async def managed_site(site: Site, size: str = "xs") -> Resource:
    """The offering provider and a managed cluster; the cluster as created."""
    await site.create(offering_provider())
    (cluster,) = await site.create(managed_cluster(size=size))
    return cluster
