"""The backup requests of ``herder cluster backup``: each adds one to the cluster's requests and answers
with its number; a cluster being deleted is refused."""

from __future__ import annotations

import json

import pytest

from herder.controllers.backups.requests import BackupRefused, BackupRequests
from tests.controllers.backed_up import cluster
from tests.controllers.site import Site


async def test_each_request_is_numbered_and_a_cluster_being_deleted_is_refused(site: Site) -> None:
    requests = BackupRequests(site.store)
    (made,) = await site.create(cluster())
    assert json.loads(await requests.request(made, "serviceaccount:ops", "Operator", {})) == {"requested": 1}
    assert json.loads(await requests.request(made, "serviceaccount:ops", "Operator", {})) == {"requested": 2}
    assert (await site.status("Cluster", "alpha"))["backups"]["requested"] == 2
    current = await site.get("Cluster", "alpha")
    assert current is not None
    held = current.clone()
    held.metadata.finalizers = ["test.herder.dev/hold"]
    await site.store.update(held)
    await site.store.delete("Cluster", "alpha", "default")
    going = await site.get("Cluster", "alpha")
    assert going is not None
    with pytest.raises(BackupRefused, match="being deleted"):
        await requests.request(going, "serviceaccount:ops", "Operator", {})
