"""ClusterSecretsController's decisions: a cluster's secrets bundle is made once, for the version contract
of the Talos version it is created with (taking a key made ahead), and never again; its contract and that
first version are shown on the cluster's status for good."""

from __future__ import annotations

from herder.controllers.clusters.cluster_secrets import ClusterSecretsController
from herder.controllers.clusters.key_pool import KeyPool
from herder.talos import pki
from herder.talos.secrets import load_secrets
from tests.controllers.fleet import TALOS, Fleet
from tests.controllers.site import Site, secrets_bundle


class MadeAhead(KeyPool):
    """A pool whose keys were made before the test (an RSA key takes seconds): the session bundle's."""

    def __init__(self) -> None:
        super().__init__(1)
        self.taken = 0

    async def take(self) -> pki.PrivateKey:
        self.taken += 1
        return pki.load_private_key(load_secrets(secrets_bundle("1.13")).k8s_service_account_key)


async def test_a_clusters_secrets_are_made_once_for_its_first_contract(site: Site) -> None:
    fleet = Fleet(site)
    cluster = await fleet.cluster(secrets=False, bootstrapped=False)
    keys = MadeAhead()
    controller = ClusterSecretsController(keys)
    await site.reconcile(controller, fleet.key)
    made = await site.get("ClusterSecrets", fleet.name)
    assert made is not None and (made.spec or {})["talosContract"] == "1.13"
    assert made.metadata.controller_ref() is not None
    assert keys.taken == 1
    status = await site.status("Cluster", fleet.name)
    assert (status["talosContract"], status["initialTalosVersion"]) == ("1.13", TALOS)
    assert ("Normal", "SecretsGenerated", "generated for Talos contract 1.13") in await site.told(cluster)

    # An upgrade changes neither the bundle nor the version the cluster began with.
    current = await site.get("Cluster", fleet.name)
    assert current is not None
    upgraded = current.clone()
    upgraded.spec = {**(current.spec or {}), "talosVersion": "v1.13.2"}
    await site.store.update(upgraded)
    await site.reconcile(controller, fleet.key)
    again = await site.get("ClusterSecrets", fleet.name)
    assert again is not None and again.metadata.resource_version == made.metadata.resource_version
    assert keys.taken == 1
    assert (await site.status("Cluster", fleet.name))["initialTalosVersion"] == TALOS
