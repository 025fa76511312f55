"""Offerings: every InfraProvider whose ``spec.managedControlPlanes`` offers managed control planes gets a
ManagedControlPlaneOffering named as the provider without herder's reserved prefix, holding what users
may know of it (size names, machine counts, Talos versions), and nothing that names the provider. It is
not owned by the provider (an owner reference would name it); this controller deletes it when the
provider stops offering, or goes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from herder.resources import Resource
from herder.resources.access import RESERVED_PREFIX
from herder.resources.managed import MANAGED_CONTROL_PLANE_OFFERING, offering_name
from herder.resources.provisioning import INFRA_PROVIDER, InfraProviderSpec, ManagedControlPlanes
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch
from herder.runtime.outputs import Owns
from herder.state.errors import NotFound
from herder.state.store import Store, WatchEvent

ProviderLookup = Callable[[str], Awaitable[Resource | None]]


def provider_lookup(store: Store) -> ProviderLookup:
    """InfraProviders by id, read from ``store`` (for the admission checks; controllers read theirs)."""

    async def get(provider_id: str) -> Resource | None:
        try:
            return await store.get(INFRA_PROVIDER.kind, provider_id)
        except NotFound:
            return None

    return get


def context_lookup(ctx: Context) -> ProviderLookup:
    """InfraProviders by id, as a controller reads them."""
    return lambda provider_id: ctx.get(ObjectKey(INFRA_PROVIDER.kind, None, provider_id))


async def offered(providers: ProviderLookup, name: str) -> tuple[Resource, ManagedControlPlanes] | None:
    """The provider offering managed control planes as ``name``, and its offer (None when none does, or
    it is being deleted)."""
    for provider_id in dict.fromkeys((RESERVED_PREFIX + name, name)):
        provider = await providers(provider_id)
        if provider is None:
            continue
        offer = INFRA_PROVIDER.spec_of(provider, InfraProviderSpec).managed_control_planes
        if offer is not None and not provider.metadata.deletion_timestamp:
            return provider, offer
    return None


class OfferingController(Controller):
    name = "ManagedControlPlaneOffering"
    primary = MANAGED_CONTROL_PLANE_OFFERING.kind
    outputs = (Owns(MANAGED_CONTROL_PLANE_OFFERING.kind),)

    def __init__(self) -> None:
        self.watches = (
            Watch(INFRA_PROVIDER.kind, self._provider_changed),
            Watch(MANAGED_CONTROL_PLANE_OFFERING.kind),
        )

    def _provider_changed(self, event: WatchEvent) -> Iterable[ObjectKey]:
        return (ObjectKey(MANAGED_CONTROL_PLANE_OFFERING.kind, None, offering_name(event.object.name)),)

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        found = await offered(context_lookup(ctx), key.name)
        current = await ctx.get(key)
        if found is None:
            if current is not None and ctx.own(current):
                await ctx.delete(key)
            return None
        _, offer = found
        spec = {
            "sizes": [{"name": n, "machines": s.machines} for n, s in offer.sizes.items()],
            "talosVersions": offer.talos_versions,
        }
        if current is None or current.spec != spec:
            await ctx.apply_output(
                None,
                Resource.model_validate(
                    {
                        "apiVersion": MANAGED_CONTROL_PLANE_OFFERING.api_version,
                        "kind": MANAGED_CONTROL_PLANE_OFFERING.kind,
                        "metadata": {"name": key.name},
                        "spec": spec,
                    }
                ),
            )
        return None
