"""The force release of a MachineRequest (an Admin's action for a request whose provider is gone): only
with ``force``; the request is deleted, its provider's finalizer dropped, and its machine let go of its
cluster without a reset, while herder's own finalizer still takes the machine out of its set."""

from __future__ import annotations

import pytest

from herder.controllers.provisioning.release import ForceRelease, ReleaseRefused
from herder.resources.provisioning import PROVIDER_FINALIZER, RELEASE_FINALIZER
from tests.controllers.provisioned import provider, reported, request
from tests.controllers.site import Site, obj


async def test_a_release_without_force_is_refused(site: Site) -> None:
    await site.create(provider())
    (made,) = await site.create(request("r1"))
    with pytest.raises(ReleaseRefused, match="force"):
        await ForceRelease(site.store)(made, "serviceaccount:admin", "Admin", {})
    current = await site.get("MachineRequest", "r1")
    assert current is not None and not current.metadata.deletion_timestamp


async def test_a_forced_release_lets_go_of_a_request_its_provider_abandoned(site: Site) -> None:
    await site.create(provider())
    (made,) = await site.create(request("r1", finalizers=[RELEASE_FINALIZER, PROVIDER_FINALIZER]))
    made = await reported(site, made, "m1", "127.0.0.2")
    await site.create(obj("Machine", "m1", spec={"endpoint": "127.0.0.2:50000"}))
    answer = await ForceRelease(site.store)(made, "serviceaccount:admin", "Admin", {"force": True})
    assert answer == b"machinerequests/r1 released\n"
    current = await site.get("MachineRequest", "r1")
    assert current is not None and current.metadata.deletion_timestamp
    assert current.metadata.finalizers == [RELEASE_FINALIZER]  # herder's: the machine leaves its set first
    machine = await site.get("Machine", "m1")
    assert machine is not None and machine.metadata.annotations["herder.dev/force-release"] == "true"
    assert ("Warning", "ForceReleased", "serviceaccount:admin let the request go without its provider") in (
        await site.told(made)
    )
