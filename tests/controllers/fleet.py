"""One cluster's objects for the unit tests of the clusters controllers: a Cluster, its machine sets, the
Machines and the ClusterMachines of them, each made in the state the decision under test reads (as the
controllers upstream of it would have left it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from herder.controllers.cluster_keys import ClusterKeys
from herder.controllers.clusters.cluster_machines import TEARDOWN_FINALIZER
from herder.resources import Resource
from herder.resources.clusters import control_plane_set_name
from herder.resources.machines import CLUSTER_LABEL, MACHINE_SET_LABEL, ROLE_LABEL
from herder.runtime.controller import ObjectKey
from tests.controllers.site import API, Site, obj

TALOS, KUBERNETES = "v1.13.0", "1.33.0"
# The annotations of a cluster whose import ``herder cluster import --abort`` is taking back.
ABORTED_IMPORT = {
    "herder.dev/imported": "talosconfig",
    "herder.dev/locked": "true",
    "herder.dev/import-aborted": "true",
}


def ready(kind: str, ok: bool = True, reason: str = "", message: str = "") -> dict[str, Any]:
    """A condition as another controller would have set it."""
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason or ("Ready" if ok else "NotReady"),
        "message": message,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


@dataclass
class Fleet:
    """The objects of cluster ``name`` on a site; machines get endpoints 127.0.9.N:50000 in order."""

    site: Site
    name: str = "alpha"
    endpoints: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> ObjectKey:
        return ObjectKey("Cluster", "default", self.name)

    @property
    def keys(self) -> ClusterKeys:
        return ClusterKeys(self.site.store)

    def endpoint(self, uuid: str) -> str:
        return self.endpoints.setdefault(uuid, f"127.0.9.{len(self.endpoints) + 1}:50000")

    async def cluster(
        self,
        *,
        secrets: bool = True,
        bootstrapped: bool = True,
        etcd_healthy: bool = True,
        annotations: dict[str, str] | None = None,
        **spec: Any,
    ) -> Resource:
        """The Cluster (with its ClusterSecrets), bootstrapped and with etcd healthy unless told not (a
        cluster not bootstrapped has no etcd to be healthy)."""
        (made,) = await self.site.create(
            obj(
                "Cluster",
                self.name,
                spec={"talosVersion": TALOS, "kubernetesVersion": KUBERNETES, **spec},
                metadata={"annotations": annotations or {}},
            )
        )
        if secrets:
            await self.site.cluster_secrets(made)
        status: dict[str, Any] = {}
        if bootstrapped:
            status["conditions"] = [ready("EtcdHealthy", etcd_healthy)]
            status["bootstrap"] = {
                "machine": "cp1",
                "requestedAt": "2026-01-01T00:00:00Z",
                "completedAt": "2026-01-01T00:00:01Z",
            }
        return await self.site.set_status(made, **status)

    async def machine_set(self, name: str, role: str = "worker", **spec: Any) -> Resource:
        (made,) = await self.site.create(
            obj(
                "MachineSet",
                name,
                spec={"role": role, **spec},
                metadata={"labels": {CLUSTER_LABEL: self.name}},
            )
        )
        return made

    async def control_plane_set(self, **spec: Any) -> Resource:
        return await self.machine_set(control_plane_set_name(self.name), "controlplane", **spec)

    async def machine(
        self,
        uuid: str,
        *,
        stage: str = "Running",
        connected: bool = True,
        talos: str = TALOS,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        **status: Any,
    ) -> Resource:
        """A Machine as its link reports it (running, reached over mTLS, unless told otherwise)."""
        (made,) = await self.site.create(
            obj(
                "Machine",
                uuid,
                spec={"endpoint": self.endpoint(uuid)},
                metadata={"labels": labels or {}, "annotations": annotations or {}},
            )
        )
        return await self.site.set_status(
            made,
            connected=connected,
            stage=stage,
            maintenance=stage == "Maintenance",
            talosVersion=talos,
            **status,
        )

    async def member(
        self,
        uuid: str,
        role: str = "worker",
        *,
        machine_set: str | None = None,
        talos: str = TALOS,
        kubernetes: str = KUBERNETES,
        **status: Any,
    ) -> Resource:
        """A ClusterMachine (with its teardown finalizer) and ``status`` as the other controllers made it."""
        in_set = machine_set or (control_plane_set_name(self.name) if role == "controlplane" else "workers")
        (made,) = await self.site.create(
            obj(
                "ClusterMachine",
                uuid,
                spec={"role": role, "talosVersion": talos, "kubernetesVersion": kubernetes},
                metadata={
                    "labels": {CLUSTER_LABEL: self.name, MACHINE_SET_LABEL: in_set, ROLE_LABEL: role},
                    "finalizers": [TEARDOWN_FINALIZER],
                },
            )
        )
        return await self.site.set_status(made, **status) if status else made

    async def leave(self, member: Resource) -> Resource:
        """Delete ``member`` as its node's going does: it stays, marked, until its teardown lets it go."""
        return await self.site.store.delete("ClusterMachine", member.name, member.namespace)

    async def config(self, member: Resource, digest: str, *, kubernetes: str = KUBERNETES) -> Resource:
        """The ClusterMachineConfig generated for ``member``, of hash ``digest``."""
        (made,) = await self.site.create(
            obj(
                "ClusterMachineConfig",
                member.name,
                spec={
                    "config": f"# config {digest}\n",
                    "hash": digest,
                    "talosContract": "1.13",
                    "talosVersion": TALOS,
                    "kubernetesVersion": kubernetes,
                },
                metadata={
                    "ownerReferences": [
                        {
                            "apiVersion": API,
                            "kind": "ClusterMachine",
                            "name": member.name,
                            "uid": member.metadata.uid,
                            "controller": True,
                        }
                    ]
                },
            )
        )
        return made

    async def node(self, uuid: str, machine_set: str, role: str = "worker", **spec: Any) -> Resource:
        """The MachineSetNode binding ``uuid`` to a set (made by hand: the set lists no machines)."""
        (made,) = await self.site.create(
            obj(
                "MachineSetNode",
                uuid,
                spec=spec,
                metadata={
                    "labels": {CLUSTER_LABEL: self.name, MACHINE_SET_LABEL: machine_set, ROLE_LABEL: role}
                },
            )
        )
        return made
