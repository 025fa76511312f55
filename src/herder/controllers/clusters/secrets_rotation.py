"""CA rotation without downtime, as ``talosctl rotate-ca`` does it: a Cluster's ``spec.secretsRotation``
(``component`` TalosCA or KubernetesCA, and a ``generation`` whose every new value asks for a new rotation)
is carried out as a phase machine on ``status.secretsRotation``:

``Preparing``: a new CA is made and kept in the ClusterSecrets (``rotation``), and added to the CAs the
machines accept (``acceptedCAs``); ``AcceptingNewCA``: every machine takes the config that accepts it;
``SwitchingIssuer``: the new CA becomes the issuing one and the old one is accepted, and every machine
takes that config; ``ReissuingCredentials``: herder's own credentials (its machine client, the gateway's,
the proxy's, the kubeconfigs it hands out), all made from the ClusterSecrets, are issued from the new CA
and reach every machine; ``DroppingOldCA``: the old CA is no longer accepted, and every machine takes
that config; ``Done``.

Each phase is persisted before its step runs, and every step is idempotent (it looks at the ClusterSecrets
and at the configs the machines run before it writes), so a restart or a kill -9 of herder in any phase
resumes where it stopped. No machine ever trusts neither CA: herder trusts both CAs throughout, and a
machine drops the old one only once every machine serves and signs from the new one. The configs roll out
through config apply (control planes one at a time behind a healthy etcd, workers by their set's update
strategy), without a reboot. A rotation does not start while the cluster is not Ready, and neither starts
nor goes on while it is locked; what it waits for is on ``status.secretsRotation.lastError`` and in Events.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from dataclasses import replace

from herder.controllers.cluster_keys import ClusterKeys
from herder.controllers.members import cluster_changes, cluster_machines, machine_of
from herder.resources import Resource
from herder.resources.cluster_secrets import CLUSTER_SECRETS, CARotationKeys, ClusterSecretsSpec
from herder.resources.clusters import (
    CLUSTER,
    CLUSTER_MACHINE,
    CLUSTER_MACHINE_CONFIG,
    ROTATION_PHASES,
    ClusterMachineConfigSpec,
    ClusterMachineStatus,
    ClusterSpec,
    ClusterStatus,
    RotationComponent,
    RotationPhase,
    SecretsRotationStatus,
    is_locked,
)
from herder.resources.machines import CLUSTER_LABEL, MACHINE, MachineSpec
from herder.resources.status import status_of
from herder.runtime.controller import (
    Context,
    Controller,
    ObjectKey,
    Result,
    Watch,
    controller_owner,
    labelled_owner,
    on_change,
    own_key,
)
from herder.runtime.outputs import Writes
from herder.talos import pki
from herder.talos.config_cas import ConfigCAs, config_cas
from herder.talos.documents import load_documents
from herder.talos.machine import MachineAPIError
from herder.talos.machine.pool import ClientPool
from herder.talos.pki import CertificateAndKey, KeyType
from herder.talos.secrets import dump_secrets, load_secrets

WAIT = 2.0
"""How soon a rotation waiting for its machines looks again (their config applies also wake it)."""

_NEW_CA = {"TalosCA": (KeyType.ED25519, "talos"), "KubernetesCA": (KeyType.ECDSA_P256, "kubernetes")}


class SecretsRotationController(Controller):
    name = "SecretsRotation"
    primary = CLUSTER.kind
    outputs = (
        Writes(CLUSTER.kind, "status.secretsRotation"),
        Writes(CLUSTER_SECRETS.kind, "spec.bundle", "spec.acceptedCAs", "spec.rotation"),
    )
    concurrency = 4

    def __init__(self, keys: ClusterKeys, clients: ClientPool | None = None) -> None:
        self._keys = keys
        self._clients = clients if clients is not None else ClientPool(keep=8, timeout=15)
        self.watches = (
            Watch(
                CLUSTER.kind,
                cluster_changes("conditions[Ready]", "secretsRotation", mapper=own_key),
            ),
            Watch(CLUSTER_SECRETS.kind, controller_owner(CLUSTER.kind)),
            Watch(
                CLUSTER_MACHINE.kind,
                on_change(labelled_owner(CLUSTER.kind, CLUSTER_LABEL), "status.configHash"),
            ),
        )

    async def shutdown(self) -> None:
        await self._clients.close()

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        cluster = await ctx.get(key)
        if cluster is None or cluster.metadata.deletion_timestamp:
            return None
        asked = CLUSTER.spec_of(cluster, ClusterSpec).secrets_rotation
        current = status_of(cluster, ClusterStatus).secrets_rotation
        locked = is_locked(cluster)
        if current is None or current.phase in ("Pending", "Done"):
            if asked is None or (
                current is not None
                and current.phase == "Done"
                and (current.component, current.generation) == (asked.component, asked.generation)
            ):
                return None
            blocked = (
                "the cluster is locked"
                if locked
                else ""
                if status_of(cluster, ClusterStatus).condition_true("Ready")
                else "the cluster is not Ready"
            )
            if blocked:
                pending = SecretsRotationStatus(
                    component=asked.component,
                    generation=asked.generation,
                    last_error=f"waiting to start: {blocked}",
                )
                await self._record(ctx, cluster, pending)
                return None  # the cluster's Ready condition or its lock brings us back
            current = SecretsRotationStatus(
                component=asked.component,
                generation=asked.generation,
                phase="Preparing",
                started_at=ctx.clock.rfc3339(),
            )
            await self._record(ctx, cluster, current)
            await ctx.event(
                cluster, "Normal", "RotationStarted", f"rotating the {_what(current.component)} CA"
            )
        if locked:
            await self._record(
                ctx, cluster, current.model_copy(update={"last_error": "paused: the cluster is locked"})
            )
            return None
        while current.phase != "Done":
            try:
                waiting = await self._step(ctx, cluster, current)
            except MachineAPIError as exc:
                waiting = str(exc)
            if waiting:
                await self._record(ctx, cluster, current.model_copy(update={"last_error": waiting}))
                return Result(requeue_after=WAIT)
            phase = ROTATION_PHASES[ROTATION_PHASES.index(current.phase) + 1]
            current = current.model_copy(
                update={
                    "phase": phase,
                    "last_error": "",
                    "finished_at": ctx.clock.rfc3339() if phase == "Done" else "",
                }
            )
            # Persisted before the next step runs: a restart resumes at that step.
            await self._record(ctx, cluster, current)
            await ctx.event(cluster, "Normal", f"Rotation{phase}", _told(current))
        return None

    async def _record(self, ctx: Context, cluster: Resource, rotation: SecretsRotationStatus) -> None:
        before = status_of(cluster, ClusterStatus).secrets_rotation

        def write(_: Resource, status: ClusterStatus) -> None:
            status.secrets_rotation = rotation

        await ctx.mutate_status(ObjectKey.of(cluster), ClusterStatus, write)
        if rotation.last_error and (before is None or before.last_error != rotation.last_error):
            await ctx.event(cluster, "Normal", "RotationWaiting", rotation.last_error)

    async def _step(self, ctx: Context, cluster: Resource, rotation: SecretsRotationStatus) -> str:
        """Run the step of ``rotation.phase``; what it still waits for, or "" once it is done."""
        secrets = await ctx.get(ObjectKey(CLUSTER_SECRETS.kind, cluster.namespace, cluster.name))
        if secrets is None:
            return "the cluster has no secrets yet"
        spec = CLUSTER_SECRETS.spec_of(secrets, ClusterSecretsSpec)
        component = rotation.component
        keys = spec.rotation
        if rotation.phase == "Preparing":
            if keys is None or (keys.component, keys.generation) != (component, rotation.generation):
                await self._prepare(ctx, secrets, rotation)
            return ""
        if keys is None or (keys.component, keys.generation) != (component, rotation.generation):
            # Only Done clears the rotation's keys, and they were kept before Preparing ended.
            if rotation.phase == "DroppingOldCA":
                return ""
            raise AssertionError(f"the keys of the {component} rotation are gone in {rotation.phase}")
        new = base64.b64decode(keys.new_crt).strip()
        if rotation.phase == "AcceptingNewCA":
            return await self._settled(ctx, cluster, component, lambda cas: new in _trusted(cas, component))
        old = base64.b64decode(keys.old_crt).strip() if keys.old_crt else b"-"
        if rotation.phase == "SwitchingIssuer":
            if _issuing(spec, component) != new:
                await self._switch(ctx, secrets, component, keys)
                return "switching the issuing CA"
            return await self._settled(
                ctx,
                cluster,
                component,
                lambda cas: _issuing_of(cas, component) == new and old in _trusted(cas, component),
            )
        if rotation.phase == "ReissuingCredentials":
            return await self._reachable(ctx, cluster, issued_by=(component, new))
        # DroppingOldCA
        if spec.accepted_cas.of(component):
            await self._drop(ctx, secrets, component)
            return "dropping the old CA"
        waiting = await self._settled(
            ctx,
            cluster,
            component,
            lambda cas: _issuing_of(cas, component) == new and old not in _trusted(cas, component),
        )
        if not waiting:
            await self._finish(ctx, secrets)
        return waiting

    async def _prepare(self, ctx: Context, secrets: Resource, rotation: SecretsRotationStatus) -> None:
        key_type, organization = _NEW_CA[rotation.component]
        ca = await asyncio.to_thread(pki.new_ca, key_type, organization=organization)
        keys = CARotationKeys.model_validate(
            {
                "component": rotation.component,
                "generation": rotation.generation,
                "newCrt": pki.b64encode(ca.crt),
                "newKey": pki.b64encode(ca.key),
            }
        )

        def change(obj: Resource) -> None:
            spec = CLUSTER_SECRETS.spec_of(obj, ClusterSecretsSpec)
            spec.rotation = keys
            accepted = spec.accepted_cas.of(rotation.component)
            accepted[:] = [keys.new_crt]
            obj.spec = spec.model_dump(by_alias=True, exclude_defaults=True)

        await ctx.mutate(ObjectKey.of(secrets), change)

    async def _switch(
        self, ctx: Context, secrets: Resource, component: RotationComponent, keys: CARotationKeys
    ) -> None:
        """The new CA issues, the old one is accepted: one write, so no state has neither."""
        new = CertificateAndKey(crt=base64.b64decode(keys.new_crt), key=base64.b64decode(keys.new_key))

        def change(obj: Resource) -> None:
            spec = CLUSTER_SECRETS.spec_of(obj, ClusterSecretsSpec)
            bundle = load_secrets(spec.bundle, check_keys=False)
            old = bundle.os if component == "TalosCA" else bundle.k8s
            replaced = replace(bundle, os=new) if component == "TalosCA" else replace(bundle, k8s=new)
            spec.bundle = dump_secrets(replaced)
            assert spec.rotation is not None
            spec.rotation.old_crt = pki.b64encode(old.crt)
            spec.accepted_cas.of(component)[:] = [pki.b64encode(old.crt)]
            obj.spec = spec.model_dump(by_alias=True, exclude_defaults=True)

        await ctx.mutate(ObjectKey.of(secrets), change)

    async def _drop(self, ctx: Context, secrets: Resource, component: RotationComponent) -> None:
        def change(obj: Resource) -> None:
            spec = CLUSTER_SECRETS.spec_of(obj, ClusterSecretsSpec)
            spec.accepted_cas.of(component).clear()
            obj.spec = spec.model_dump(by_alias=True, exclude_defaults=True)

        await ctx.mutate(ObjectKey.of(secrets), change)

    async def _finish(self, ctx: Context, secrets: Resource) -> None:
        """The old CA is trusted nowhere now, herder included: the rotation's keys go."""

        def change(obj: Resource) -> None:
            spec = CLUSTER_SECRETS.spec_of(obj, ClusterSecretsSpec)
            spec.rotation = None
            obj.spec = spec.model_dump(by_alias=True, exclude_defaults=True)

        await ctx.mutate(ObjectKey.of(secrets), change)

    async def _settled(
        self,
        ctx: Context,
        cluster: Resource,
        component: RotationComponent,
        taken: Callable[[ConfigCAs], bool],
    ) -> str:
        """ "" once every machine of the cluster runs a config whose CAs pass ``taken`` and answers herder;
        else which machines it waits for."""
        behind: list[str] = []
        members = [m for m in await cluster_machines(ctx, cluster) if not m.metadata.deletion_timestamp]
        for member in members:
            config = await ctx.get(ObjectKey(CLUSTER_MACHINE_CONFIG.kind, member.namespace, member.name))
            if config is None:
                behind.append(member.name)
                continue
            wanted = CLUSTER_MACHINE_CONFIG.spec_of(config, ClusterMachineConfigSpec)
            applied = status_of(member, ClusterMachineStatus).config_hash == wanted.hash
            if not applied or not taken(config_cas(load_documents(wanted.config))):
                behind.append(member.name)
        if behind:
            shown = ", ".join(sorted(behind)[:5]) + (", …" if len(behind) > 5 else "")
            return (
                f"waiting for {len(behind)} of {len(members)} machines to take the "
                f"{_what(component)} CA config: {shown}"
            )
        return await self._reachable(ctx, cluster)

    async def _reachable(
        self, ctx: Context, cluster: Resource, *, issued_by: tuple[RotationComponent, bytes] | None = None
    ) -> str:
        """ "" when herder reaches every machine's Talos API with its current credentials (those of a
        component issued by a CA, when ``issued_by`` says so), else the first machine that it does not."""
        view = await self._keys.of(cluster)
        if view is None:
            return "the cluster has no secrets yet"
        if issued_by is not None:
            component, ca = issued_by
            if (view.bundle.os if component == "TalosCA" else view.bundle.k8s).crt.strip() != ca:
                return "herder's credentials are not issued from the new CA yet"
        for member in await cluster_machines(ctx, cluster):
            machine = await machine_of(ctx, member)
            endpoint = MACHINE.spec_of(machine, MachineSpec).endpoint if machine is not None else ""
            if not endpoint:
                return f"machine {member.name} has no Talos API endpoint"
            try:
                async with self._clients.client(endpoint, view.talos) as client:
                    await client.version()
            except MachineAPIError as exc:
                return f"machine {member.name} does not answer herder's credentials: {exc}"
        return ""


def _issuing(spec: ClusterSecretsSpec, component: RotationComponent) -> bytes:
    bundle = load_secrets(spec.bundle, check_keys=False)
    return (bundle.os if component == "TalosCA" else bundle.k8s).crt.strip()


def _issuing_of(cas: ConfigCAs, component: RotationComponent) -> bytes:
    return cas.talos_issuing if component == "TalosCA" else cas.kubernetes_issuing


def _trusted(cas: ConfigCAs, component: RotationComponent) -> tuple[bytes, ...]:
    return cas.talos_trusted() if component == "TalosCA" else cas.kubernetes_trusted()


def _what(component: RotationComponent) -> str:
    return "Talos API" if component == "TalosCA" else "Kubernetes"


def _told(rotation: SecretsRotationStatus) -> str:
    phase: RotationPhase = rotation.phase
    what = _what(rotation.component)
    return {
        "AcceptingNewCA": f"a new {what} CA is made; every machine is to accept it",
        "SwitchingIssuer": f"every machine accepts the new {what} CA; it becomes the issuing one",
        "ReissuingCredentials": f"every machine takes the new {what} CA as issuer; herder re-issues its credentials",
        "DroppingOldCA": f"herder's credentials come from the new {what} CA; the old one is being dropped",
        "Done": f"the {what} CA is rotated: the old one is trusted nowhere",
    }.get(phase, phase)
