"""The emulated Kubernetes of one cluster, put together: its API server (``apiserver``), what its kubelets
and controllers write there (``sync``, with the objects of ``manifests``), the scheduler that places
everyone else's pods (``scheduler``), the Job controller that runs Jobs' pods to their end (``jobs``) and the
apiextensions controller that serves custom resources (``crds``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from herder.emu.cluster import scheduler
from herder.emu.cluster.apiserver import ApiServer
from herder.emu.cluster.crds import CustomResources
from herder.emu.cluster.jobs import Jobs
from herder.emu.cluster.kube_api import ApiEndpoint
from herder.emu.cluster.kube_facts import KubeFacts
from herder.emu.cluster.kubelet import Kubelet
from herder.emu.cluster.state import Cluster
from herder.emu.cluster.sync import Components
from herder.state.store import Store
from herder.talos.pki import CertificateAndKey


class ClusterKubernetes:
    """One cluster's Kubernetes API, served by each of its control planes that runs kube-apiserver, and the
    emulated components that write to it."""

    def __init__(self, cluster: Cluster, resync: Callable[[], None]) -> None:
        """``resync`` asks for another sync: someone else's pod needs scheduling, or a sync was cut short."""
        self.cluster = cluster
        self._resync = resync
        self.apiserver = ApiServer(cluster, resync)
        self.components = Components(self.apiserver.store, cluster, resync)
        self.jobs = Jobs(self.apiserver.store)
        self.custom_resources = CustomResources(self.apiserver.store, self.apiserver.registry)
        self._scheduler: asyncio.Task[None] | None = None
        self._started = False

    @property
    def endpoints(self) -> dict[str, ApiEndpoint]:
        """The API servers serving now, by the uuid of the control plane that runs each."""
        return self.apiserver.endpoints

    @property
    def store(self) -> Store:
        """The API's objects, in the cluster's etcd keyspace."""
        return self.apiserver.store

    async def start(self, ca: CertificateAndKey) -> None:
        """Open the API's store and the scheduler's watch of pods (once)."""
        if self._started:
            return
        self._started = True
        self.components.ca_pem = ca.crt.decode()
        await self.apiserver.start()
        self.jobs.start()
        self.custom_resources.start()
        self._scheduler = asyncio.get_running_loop().create_task(scheduler.watch(self.store, self._resync))

    async def serve(self, ca: CertificateAndKey, apiservers: list[Kubelet]) -> None:
        """Run kube-apiserver on exactly these control planes (see ``ApiServer.serve``)."""
        await self.apiserver.serve(ca, apiservers)

    async def sync(self, kubelets: list[Kubelet], cluster_facts: KubeFacts | None) -> None:
        """Make the API's objects follow the machines (while a control plane serves the API)."""
        if cluster_facts is not None:
            self.apiserver.follow_version(cluster_facts.apiserver_version)
        self.apiserver.kubelets = {k.name: k for k in kubelets if k.facts.register_node}
        if self.endpoints:
            await self.components.sync(kubelets, cluster_facts)

    async def close(self) -> None:
        await self.jobs.close()
        await self.custom_resources.close()
        if self._scheduler is not None:
            self._scheduler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scheduler
        await self.apiserver.close()
