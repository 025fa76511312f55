"""The import of a running cluster: ClusterImport tells on ``Imported`` how many listed machines herder took
over (False, TakingOver, until each has its config recorded; then True, for good), and the Cluster's
``import`` action turns the bundle read back out of the machines into ClusterSecrets, once, for an
imported cluster only, refusing bad input naming the field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from herder.controllers.clusters.cluster_import import ClusterImportController, ImportRefused, ImportSecrets
from herder.resources.clusters import IMPORTED_ANNOTATION, LOCKED_ANNOTATION
from herder.talos.secrets import load_secrets
from tests.controllers.fleet import Fleet
from tests.controllers.site import Site, secrets_bundle

IMPORTED = {IMPORTED_ANNOTATION: "talosconfig", LOCKED_ANNOTATION: "true"}


def _imported(status: dict[str, Any]) -> dict[str, str]:
    (condition,) = [c for c in status.get("conditions", []) if c["type"] == "Imported"]
    return {k: condition[k] for k in ("status", "reason", "message")}


async def test_imported_says_how_many_machines_are_taken_over_until_all_are(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster(secrets=False, annotations=IMPORTED)
    for uuid in ("cp1", "w1", "w2"):
        await fleet.machine(uuid)
    await fleet.control_plane_set(machines=["cp1"])
    await fleet.machine_set("workers", machines=["w1", "w2"])
    await fleet.member("cp1", "controlplane", configHash="c1")
    w1 = await fleet.member("w1")
    await site.reconcile(ClusterImportController(), fleet.key)
    assert _imported(await site.status("Cluster", fleet.name)) == {
        "status": "False",
        "reason": "TakingOver",
        "message": "1 of 3 machines taken over; waiting for w1, w2",
    }
    await site.set_status(w1, configHash="c1")
    await fleet.member("w2", configHash="c1")
    await site.reconcile(ClusterImportController(), fleet.key)
    assert _imported(await site.status("Cluster", fleet.name)) == {
        "status": "True",
        "reason": "Imported",
        "message": "herder runs the 3 machines with the configs they ran; nothing was applied",
    }
    cluster = await site.get("Cluster", fleet.name)
    assert ("Normal", "Imported", _imported(cluster.status or {})["message"]) in await site.told(cluster)


async def test_a_cluster_herder_made_gets_no_imported_condition(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine("w1")
    await fleet.machine_set("workers", machines=["w1"])
    await site.reconcile(ClusterImportController(), fleet.key)
    conditions = (await site.status("Cluster", fleet.name)).get("conditions", [])
    assert [c for c in conditions if c["type"] == "Imported"] == []


async def test_the_import_action_makes_the_clusters_secrets_once(site: Site) -> None:
    fleet = Fleet(site)
    cluster = await fleet.cluster(secrets=False, annotations=IMPORTED)
    action = ImportSecrets(site.store)
    answer = await action.give(
        cluster, "admin", "Admin", {"bundle": secrets_bundle("1.13"), "talosContract": "1.13"}
    )
    assert json.loads(answer) == {"imported": True}
    secrets = await site.get("ClusterSecrets", fleet.name)
    assert secrets is not None
    assert [(o.kind, o.name, o.controller) for o in secrets.metadata.owner_references] == [
        ("Cluster", fleet.name, True)
    ]
    spec = secrets.spec or {}
    assert spec["talosContract"] == "1.13"
    assert load_secrets(spec["bundle"]) == load_secrets(secrets_bundle("1.13"))
    with pytest.raises(ImportRefused, match=f"cluster {fleet.name} has its secrets already") as again:
        await action.give(
            cluster, "admin", "Admin", {"bundle": secrets_bundle("1.13"), "talosContract": "1.13"}
        )
    assert again.value.code == 409


@pytest.mark.parametrize(
    ("options", "code", "message"),
    [
        ({}, 400, "bundle: required, the secrets bundle in talosctl's secrets YAML format"),
        ({"bundle": "cluster: [", "talosContract": "1.13"}, 400, "bundle: "),
        ({"bundle": "x", "talosContract": "one"}, 400, "talosContract: "),
    ],
)
async def test_the_import_action_refuses_bad_input_naming_the_field(
    site: Site, options: dict[str, str], code: int, message: str
) -> None:
    cluster = await Fleet(site).cluster(secrets=False, annotations=IMPORTED)
    with pytest.raises(ImportRefused) as refused:
        await ImportSecrets(site.store).give(cluster, "admin", "Admin", options)
    assert refused.value.code == code and str(refused.value).startswith(message)
    assert await site.get("ClusterSecrets", cluster.name) is None


async def test_the_import_action_is_for_an_imported_cluster_only(site: Site) -> None:
    cluster = await Fleet(site).cluster(secrets=False)
    with pytest.raises(ImportRefused, match=r"is not being imported \(herder.dev/imported\)") as refused:
        await ImportSecrets(site.store).give(cluster, "admin", "Admin", {"bundle": secrets_bundle("1.13")})
    assert refused.value.code == 409
