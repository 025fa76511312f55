"""DELETE on a collection (what client-go's DeleteCollection and controller-runtime's DeleteAllOf send),
in-process with the ``Guarded`` policy, so the store shows what was and was not deleted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from herder.krm.app import build_app
from herder.resources import Resource
from herder.resources.catalog import herder_registry
from herder.state.errors import NotFound
from herder.state.memory import MemoryBackend
from herder.state.store import Store
from tests.krm.policies import HIDDEN, LOCKED, Guarded

PATCHES = "/apis/herder.dev/v1alpha1/namespaces/default/configpatches"


def patch_object(name: str, **labels: str) -> Resource:
    return Resource.model_validate(
        {
            "apiVersion": "herder.dev/v1alpha1",
            "kind": "ConfigPatch",
            "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {"data": "machine: {}"},
        }
    )


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    async with Store(MemoryBackend(), herder_registry()) as store:
        await store.create(
            Resource.model_validate(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}
            )
        )
        for name, labels in (
            ("plain", {"set": "a"}),
            ("also", {"set": "a"}),
            ("other-set", {"set": "b"}),
            ("hidden", {"set": "a", HIDDEN: "true"}),
            ("locked", {"set": "a", LOCKED: "true"}),
        ):
            await store.create(patch_object(name, **labels))
        finalized = patch_object("finalized", set="a")
        finalized.metadata.finalizers = ["test.herder.dev/hold"]
        await store.create(finalized)
        yield store


@pytest.fixture
async def http(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    app = build_app(store.registry, store, Guarded())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://krm") as client:
        yield client


async def names(store: Store) -> list[str]:
    return sorted(o.name for o in (await store.list("ConfigPatch", "default")).items)


async def test_deletes_what_the_selector_matches_and_the_caller_may_see_and_delete(
    http: httpx.AsyncClient, store: Store
) -> None:
    answer = await http.delete(PATCHES, params={"labelSelector": "set=a"})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    assert body["kind"] == "ConfigPatchList" and body["apiVersion"] == "herder.dev/v1alpha1"
    items = {i["metadata"]["name"]: i for i in body["items"]}
    # The hidden object is neither deleted nor counted; the locked one stays, and says why.
    assert sorted(items) == ["also", "finalized", "plain"]
    assert "deletionTimestamp" in items["finalized"]["metadata"]
    assert answer.headers.get_list("warning") == [
        '299 - "configpatches \\"locked\\" was not deleted: anonymous may not deletecollection locked configpatches"'
    ]
    assert await names(store) == ["finalized", "hidden", "locked", "other-set"]
    assert (await store.get("ConfigPatch", "finalized", "default")).metadata.deletion_timestamp
    for gone in ("plain", "also"):
        with pytest.raises(NotFound):
            await store.get("ConfigPatch", gone, "default")


async def test_field_selectors_and_dry_run(http: httpx.AsyncClient, store: Store) -> None:
    before = await names(store)
    answer = await http.delete(PATCHES, params={"fieldSelector": "metadata.name=plain", "dryRun": "All"})
    assert [i["metadata"]["name"] for i in answer.json()["items"]] == ["plain"]
    options = await http.request(
        "DELETE", PATCHES, json={"dryRun": ["All"]}, headers={"content-type": "application/json"}
    )
    assert len(options.json()["items"]) == 4  # every visible object but the locked one
    assert await names(store) == before
    answer = await http.delete(PATCHES, params={"fieldSelector": "metadata.name=hidden"})
    assert answer.json()["items"] == [] and "warning" not in answer.headers
    assert await names(store) == before
