"""SecretsRotationController's decisions: a rotation walks its phases only as every machine takes each
config (generated for real from the ClusterSecrets it writes), so no machine ever trusts neither CA nor
serves from a CA herder does not trust; it does not start while the cluster is not Ready or is locked; and
a restart in any phase (the phase persisted, the step not yet recorded) repeats the step without harm."""

from __future__ import annotations

from typing import Any

import pytest

from herder.controllers.cluster_keys import ClusterKeys
from herder.controllers.clusters.cluster_machine_config import ClusterMachineConfigController
from herder.controllers.clusters.secrets_rotation import SecretsRotationController
from herder.resources.clusters import LOCKED_ANNOTATION
from herder.runtime.controller import ObjectKey
from herder.talos.config_cas import ConfigCAs, config_cas
from herder.talos.documents import load_documents
from herder.talos.machine.pool import ClientPool
from herder.talos.secrets import load_secrets
from tests.controllers.fleet import Fleet, ready
from tests.controllers.site import Site

ENDPOINT = "https://k8s.example.com:6443"
MEMBERS = {"cp1": "controlplane", "cp2": "controlplane", "w1": "worker"}


class Rotation:
    """A cluster of two control planes and a worker, its configs made by the real config controller, and
    each machine "applying" its config when told (its status.configHash set, as config apply does)."""

    def __init__(self, site: Site, fleet: Fleet) -> None:
        self.site = site
        self.fleet = fleet
        self.keys = ClusterKeys(site.store)
        self.configs = ClusterMachineConfigController(self.keys)
        self.rotation = SecretsRotationController(self.keys, ClientPool(dialer=site.machines, keep=0))
        self.applied: dict[str, ConfigCAs] = {}

    async def start(self, *, cluster_ready: bool = True, **spec: Any) -> None:
        cluster = await self.fleet.cluster(endpoint=ENDPOINT, **spec)
        conditions = [*(cluster.status or {}).get("conditions", []), ready("Ready", cluster_ready)]
        await self.site.set_status(cluster, conditions=conditions)
        for uuid, role in MEMBERS.items():
            await self.fleet.machine(uuid)
            await self.fleet.member(uuid, role)
            await self.apply(uuid)

    async def apply(self, uuid: str) -> bool:
        """Regenerate ``uuid``'s config and apply it; whether it changed."""
        await self.site.reconcile(self.configs, ObjectKey("ClusterMachine", "default", uuid))
        config = await self.site.get("ClusterMachineConfig", uuid)
        assert config is not None
        status = await self.site.status("ClusterMachine", uuid)
        if status.get("configHash") == config.spec["hash"]:
            return False
        member = await self.site.get("ClusterMachine", uuid)
        assert member is not None
        await self.site.set_status(member, configHash=config.spec["hash"])
        self.applied[uuid] = config_cas(load_documents(config.spec["config"]))
        return True

    async def reconcile(self) -> dict[str, Any]:
        await self.site.reconcile(self.rotation, self.fleet.key)
        return dict((await self.site.status("Cluster", self.fleet.name)).get("secretsRotation") or {})

    async def herder_trusts_every_machine(self, component: str) -> None:
        """herder's credentials are accepted by every machine, and herder trusts what each serves from."""
        view = await self.keys.of(await self.cluster())
        assert view is not None
        if component == "TalosCA":
            signs, trusts = view.bundle.os.crt.strip(), view.talos.ca
        else:
            signs, trusts = view.bundle.k8s.crt.strip(), view.kubernetes.ca
        for uuid, cas in self.applied.items():
            trusted = cas.talos_trusted() if component == "TalosCA" else cas.kubernetes_trusted()
            serves = cas.talos_issuing if component == "TalosCA" else cas.kubernetes_issuing
            assert signs in trusted, f"{uuid} refuses herder's {component} credentials"
            assert serves in trusts, f"herder does not trust the {component} {uuid} serves from"

    async def cluster(self) -> Any:
        found = await self.site.get("Cluster", self.fleet.name)
        assert found is not None
        return found

    async def secrets(self) -> dict[str, Any]:
        found = await self.site.get("ClusterSecrets", self.fleet.name)
        assert found is not None
        return dict(found.spec or {})

    async def run(self, component: str) -> list[str]:
        """Ask for a rotation of ``component`` and roll every config out one machine at a time, checking
        trust after each apply, until Done; the phases seen, in order."""
        cluster = await self.cluster()
        spec = {**(cluster.spec or {}), "secretsRotation": {"component": component, "generation": 1}}
        await self.site.store.update(cluster.model_copy(update={"spec": spec}))
        phases: list[str] = []
        for _ in range(40):
            rotation = await self.reconcile()
            if not phases or phases[-1] != rotation["phase"]:
                phases.append(rotation["phase"])
            if rotation["phase"] == "Done":
                return phases
            for uuid in MEMBERS:
                if await self.apply(uuid):
                    await self.herder_trusts_every_machine(component)
                    break
        raise AssertionError(f"the rotation did not finish: {phases}")


@pytest.mark.parametrize("component", ["TalosCA", "KubernetesCA"])
async def test_a_rotation_walks_every_phase_and_leaves_the_old_ca_trusted_nowhere(
    site: Site, component: str
) -> None:
    rotation = Rotation(site, Fleet(site))
    await rotation.start()
    before = load_secrets((await rotation.secrets())["bundle"])
    old = (before.os if component == "TalosCA" else before.k8s).crt.strip()
    await rotation.run(component)
    # Each phase told as it began (ReissuingCredentials passes within one reconcile here).
    told = [reason for _, reason, _ in await site.told(await rotation.cluster())]
    phases = [r.removeprefix("Rotation") for r in told if r not in ("RotationStarted", "RotationWaiting")]
    assert phases == ["AcceptingNewCA", "SwitchingIssuer", "ReissuingCredentials", "DroppingOldCA", "Done"]
    assert told[0] == "RotationStarted"
    secrets = await rotation.secrets()
    after = load_secrets(secrets["bundle"])
    new = (after.os if component == "TalosCA" else after.k8s).crt.strip()
    assert new != old
    # The other CA is untouched.
    assert (after.k8s if component == "TalosCA" else after.os) == (
        before.k8s if component == "TalosCA" else before.os
    )
    assert "rotation" not in secrets and not any((secrets.get("acceptedCAs") or {}).values())
    for uuid, cas in rotation.applied.items():
        trusted = cas.talos_trusted() if component == "TalosCA" else cas.kubernetes_trusted()
        assert trusted == (new,), uuid
    status = await site.status("Cluster", "alpha")
    done = status["secretsRotation"]
    assert (done["component"], done["generation"], done["lastError"]) == (component, 1, "")
    assert done["startedAt"] and done["finishedAt"]
    # herder checked every machine answers its credentials after each step.
    assert {c.endpoint for c in site.machines.made("version")} == {
        rotation.fleet.endpoint(u) for u in MEMBERS
    }
    # Done stays done: the same generation does not rotate again.
    assert (await rotation.reconcile())["phase"] == "Done"
    assert (await rotation.secrets())["bundle"] == secrets["bundle"]


async def test_a_rotation_waits_for_every_machine_and_says_which(site: Site) -> None:
    rotation = Rotation(site, Fleet(site))
    await rotation.start()
    cluster = await rotation.cluster()
    spec = {**(cluster.spec or {}), "secretsRotation": {"component": "TalosCA", "generation": 1}}
    await site.store.update(cluster.model_copy(update={"spec": spec}))
    status = await rotation.reconcile()
    assert status["phase"] == "AcceptingNewCA"
    assert status["lastError"] == (
        "waiting for 3 of 3 machines to take the Talos API CA config: cp1, cp2, w1"
    )
    await rotation.apply("cp1")
    await rotation.apply("w1")
    status = await rotation.reconcile()
    assert status["lastError"].endswith(": cp2")


async def test_a_rotation_does_not_start_while_the_cluster_is_not_ready(site: Site) -> None:
    rotation = Rotation(site, Fleet(site))
    await rotation.start(cluster_ready=False, secretsRotation={"component": "TalosCA", "generation": 1})
    before = await rotation.secrets()
    status = await rotation.reconcile()
    assert (status["phase"], status["lastError"]) == ("Pending", "waiting to start: the cluster is not Ready")
    assert await rotation.secrets() == before
    cluster = await rotation.cluster()
    await site.set_status(cluster, conditions=[ready("EtcdHealthy"), ready("Ready")])
    assert (await rotation.reconcile())["phase"] == "AcceptingNewCA"


async def test_a_locked_cluster_neither_starts_nor_goes_on_rotating(site: Site) -> None:
    rotation = Rotation(site, Fleet(site))
    await rotation.start(secretsRotation={"component": "KubernetesCA", "generation": 1})
    cluster = await rotation.cluster()
    locked = cluster.clone()
    locked.metadata.annotations[LOCKED_ANNOTATION] = "true"
    await site.store.update(locked)
    assert (await rotation.reconcile())["lastError"] == "waiting to start: the cluster is locked"
    unlocked = (await rotation.cluster()).clone()
    del unlocked.metadata.annotations[LOCKED_ANNOTATION]
    await site.store.update(unlocked)
    assert (await rotation.reconcile())["phase"] == "AcceptingNewCA"
    for uuid in MEMBERS:
        await rotation.apply(uuid)
    relocked = (await rotation.cluster()).clone()
    relocked.metadata.annotations[LOCKED_ANNOTATION] = "true"
    await site.store.update(relocked)
    status = await rotation.reconcile()
    assert (status["phase"], status["lastError"]) == ("AcceptingNewCA", "paused: the cluster is locked")


async def test_a_restart_in_any_phase_repeats_its_step_without_harm(site: Site) -> None:
    """A kill -9 after a step's write but before its phase moved on: the step runs again, idempotently
    (the new CA is made once, the switch is made once)."""
    rotation = Rotation(site, Fleet(site))
    await rotation.start(secretsRotation={"component": "TalosCA", "generation": 1})
    assert (await rotation.reconcile())["phase"] == "AcceptingNewCA"
    made = (await rotation.secrets())["rotation"]

    async def back_to(phase: str) -> None:
        cluster = await rotation.cluster()
        status = dict(cluster.status or {})
        status["secretsRotation"] = {**status["secretsRotation"], "phase": phase}
        await site.store.update_status(cluster.model_copy(update={"status": status}))
        # A new controller, as a restarted herder has.
        rotation.rotation = SecretsRotationController(
            ClusterKeys(site.store), ClientPool(dialer=site.machines, keep=0)
        )

    await back_to("Preparing")
    assert (await rotation.reconcile())["phase"] == "AcceptingNewCA"
    assert (await rotation.secrets())["rotation"] == made
    for uuid in MEMBERS:
        await rotation.apply(uuid)
    assert (await rotation.reconcile())["phase"] == "SwitchingIssuer"
    switched = await rotation.secrets()
    await back_to("SwitchingIssuer")
    await rotation.reconcile()
    assert await rotation.secrets() == switched
    for uuid in MEMBERS:
        await rotation.apply(uuid)
    await rotation.herder_trusts_every_machine("TalosCA")
    phases = [(await rotation.reconcile())["phase"]]
    for uuid in MEMBERS:
        await rotation.apply(uuid)
    phases.append((await rotation.reconcile())["phase"])
    assert phases == ["DroppingOldCA", "Done"]
