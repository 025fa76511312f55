"""ManagedControlPlaneOffering's decisions: a provider offering managed control planes gets an offering
named without herder's prefix, saying only what users may know; it goes when the offer does."""

from __future__ import annotations

from herder.controllers.managed.offerings import OfferingController
from herder.runtime.controller import ObjectKey
from tests.controllers.managed import HIDDEN, offering_provider
from tests.controllers.provisioned import TALOS
from tests.controllers.site import Site

KEY = ObjectKey("ManagedControlPlaneOffering", None, "emu")


async def test_an_offer_is_projected_without_what_names_the_provider(site: Site) -> None:
    controller = OfferingController()
    (provider,) = await site.create(offering_provider())
    assert await site.show(controller, provider) == [KEY]
    await site.reconcile(controller, KEY)
    offering = await site.get("ManagedControlPlaneOffering", "emu", None)
    assert offering is not None
    assert offering.spec == {
        "sizes": [{"name": "xs", "machines": 1}, {"name": "s", "machines": 3}],
        "talosVersions": [TALOS],
    }
    assert HIDDEN not in offering.model_dump_json()  # no owner reference, no provider data
    assert offering.metadata.owner_references == []


async def test_an_offer_withdrawn_takes_its_offering_with_it(site: Site) -> None:
    controller = OfferingController()
    (provider,) = await site.create(offering_provider())
    await site.reconcile(controller, KEY)
    withdrawn = provider.clone()
    withdrawn.spec = {k: v for k, v in (withdrawn.spec or {}).items() if k != "managedControlPlanes"}
    await site.store.update(withdrawn)
    await site.reconcile(controller, KEY)
    assert await site.get("ManagedControlPlaneOffering", "emu", None) is None
