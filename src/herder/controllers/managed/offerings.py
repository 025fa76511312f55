"""Offerings: every InfraProvider whose ``spec.managedControlPlanes`` offers managed control planes gets a
ManagedControlPlaneOffering named as the provider without herder's reserved prefix, holding what users
may know of it (size names, machine counts, Talos versions), and nothing that names the provider. It is
not owned by the provider (an owner reference would name it); this controller deletes it when the
provider stops offering, or goes.
"""

from __future__ import annotations

from collections.abc import Iterable

from herder.resources import Resource
from herder.resources.access import RESERVED_PREFIX
from herder.resources.managed import MANAGED_CONTROL_PLANE_OFFERING, offering_name
from herder.resources.provisioning import INFRA_PROVIDER, InfraProviderSpec, ManagedControlPlanes
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch
from herder.state.errors import NotFound
from herder.state.store import CONTROLLER_ANNOTATION, Store, WatchEvent


async def offered(store: Store, name: str) -> tuple[Resource, ManagedControlPlanes] | None:
    """The provider offering managed control planes as ``name``, and its offer (None when none does, or
    it is being deleted)."""
    for provider_id in dict.fromkeys((RESERVED_PREFIX + name, name)):
        try:
            provider = await store.get(INFRA_PROVIDER.kind, provider_id)
        except NotFound:
            continue
        offer = INFRA_PROVIDER.spec_of(provider, InfraProviderSpec).managed_control_planes
        if offer is not None and not provider.metadata.deletion_timestamp:
            return provider, offer
    return None


class OfferingController(Controller):
    name = "ManagedControlPlaneOffering"

    def __init__(self) -> None:
        self.watches = (
            Watch(INFRA_PROVIDER.kind, self._provider_changed),
            Watch(MANAGED_CONTROL_PLANE_OFFERING.kind),
        )

    def _provider_changed(self, event: WatchEvent) -> Iterable[ObjectKey]:
        return (ObjectKey(MANAGED_CONTROL_PLANE_OFFERING.kind, None, offering_name(event.object.name)),)

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        found = await offered(ctx.store, key.name)
        current = await ctx.get(key)
        if found is None:
            if current is not None and current.metadata.annotations.get(CONTROLLER_ANNOTATION) == self.name:
                await ctx.delete(key)
            return None
        _, offer = found
        spec = {
            "sizes": [{"name": n, "machines": s.machines} for n, s in offer.sizes.items()],
            "talosVersions": offer.talos_versions,
        }
        if current is None:
            await ctx.create(
                Resource.model_validate(
                    {
                        "apiVersion": MANAGED_CONTROL_PLANE_OFFERING.api_version,
                        "kind": MANAGED_CONTROL_PLANE_OFFERING.kind,
                        "metadata": {"name": key.name, "annotations": {CONTROLLER_ANNOTATION: self.name}},
                        "spec": spec,
                    }
                )
            )
        elif current.spec != spec:
            changed = current.clone()
            changed.spec = spec
            await ctx.update(changed)
        return None
