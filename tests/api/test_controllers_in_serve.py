"""``herder serve`` runs the controller runtime: garbage collection works through the API, and the
runtime's metrics are served to platform staff only."""

from __future__ import annotations

import asyncio

from herder.resources import OwnerReference, Resource
from tests.api.server import Server


def _patch(name: str, owner: Resource | None = None) -> Resource:
    obj = Resource.model_validate(
        {
            "apiVersion": "herder.dev/v1alpha1",
            "kind": "ConfigPatch",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"data": "machine: {}"},
        }
    )
    if owner is not None:
        obj.metadata.owner_references = [
            OwnerReference(
                apiVersion=owner.api_version, kind=owner.kind, name=owner.name, uid=owner.metadata.uid or ""
            )
        ]
    return obj


async def test_dependents_are_collected_after_their_owner(server: Server) -> None:
    async with server.client() as admin:
        owner = await admin.create(_patch("gc-owner"))
        await admin.create(_patch("gc-dependent", owner))
        await admin.delete("configpatches", "gc-owner", "default")
        for _ in range(200):
            names = {o.name for o in (await admin.list("configpatches", "default")).items}
            if "gc-dependent" not in names:
                break
            await asyncio.sleep(0.05)
        assert "gc-dependent" not in names


async def test_metrics_for_admin_and_not_for_reader(server: Server, tokens: dict[str, str]) -> None:
    async with server.http(tokens["Admin"]) as admin:
        answer = await admin.get("/metrics")
        assert answer.status_code == 200
        assert 'herder_reconcile_total{controller="GarbageCollector"' in answer.text
        assert "herder_store_writes_total" in answer.text
    async with server.http(tokens["Reader"]) as reader:
        assert (await reader.get("/metrics")).status_code == 403
    async with server.http(None) as anonymous:
        assert (await anonymous.get("/metrics")).status_code == 401
