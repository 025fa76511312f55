"""ProviderConfigPatch's decisions: a provider's patch for one of its requests becomes a patch of the
request's machine once its UUID is known, and goes with the request; one naming another provider's
request targets nothing, and says so."""

from __future__ import annotations

from herder.controllers.provisioning.provider_config_patches import ProviderConfigPatchController
from herder.resources import Resource
from herder.runtime.controller import ObjectKey
from tests.controllers.provisioned import provider, reported, request
from tests.controllers.site import Site, obj


def _patch(name: str, request_name: str, provider_id: str = "emu") -> Resource:
    return obj(
        "ConfigPatch",
        name,
        spec={"data": "machine: {}"},
        metadata={
            "labels": {
                "herder.dev/machine-request": request_name,
                "herder.dev/infra-provider-id": provider_id,
            }
        },
    )


async def test_a_providers_patch_targets_its_requests_machine_once_reported(site: Site) -> None:
    controller = ProviderConfigPatchController()
    await site.create(provider())
    (made,) = await site.create(request("r1"))
    (patch,) = await site.create(_patch("r1-network", "r1"))
    await site.reconcile(controller, ObjectKey.of(patch))
    owned = await site.get("ConfigPatch", "r1-network")
    assert owned is not None and [r.name for r in owned.metadata.owner_references] == ["r1"]
    assert "herder.dev/machine" not in owned.metadata.labels  # no machine yet
    await site.show(controller, owned)
    provisioned = await reported(site, made, "M1", "127.0.0.2")
    assert await site.show(controller, provisioned) == [ObjectKey.of(patch)]
    await site.reconcile(controller, ObjectKey.of(patch))
    targeted = await site.get("ConfigPatch", "r1-network")
    assert targeted is not None and targeted.metadata.labels["herder.dev/machine"] == "m1"
    assert not targeted.metadata.owner_references[0].controller  # a dependent, not another's output


async def test_a_patch_naming_another_providers_request_targets_nothing(site: Site) -> None:
    await site.create(provider(), provider("other"))
    (made,) = await site.create(request("r1"))
    await reported(site, made, "m1", "127.0.0.2")
    (patch,) = await site.create(_patch("sneaky", "r1", "other"))
    await site.reconcile(ProviderConfigPatchController(), ObjectKey.of(patch))
    left = await site.get("ConfigPatch", "sneaky")
    assert (
        left is not None
        and "herder.dev/machine" not in left.metadata.labels
        and not left.metadata.owner_references
    )
    assert ("Warning", "NotThisProvidersRequest", "machine request r1 is not of infra provider other") in (
        await site.told(patch)
    )
