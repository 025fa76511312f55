"""What one machine's kubelet knows of itself: the machine layer makes a ``Kubelet`` of each machine configured
for a cluster, and the cluster's emulated Kubernetes acts on them (its Node, its pods, its API server)."""

from __future__ import annotations

from dataclasses import dataclass

from herder.emu.cluster.kube_facts import KubeFacts
from herder.talos.pki import CertificateAndKey


@dataclass(frozen=True)
class Kubelet:
    """What one machine's kubelet knows: who it is, how it is configured, and whether it is up."""

    uuid: str
    hostname: str
    address: str
    talos_version: str
    cpus: int
    memory_mib: int
    disk_bytes: int
    control_plane: bool
    facts: KubeFacts
    kubernetes_ca: CertificateAndKey | None
    """The cluster's Kubernetes CA as its config carries it (with the key on control planes)."""
    up: bool
    """The machine runs, reachable: its kubelet answers and its etcd member (on a control plane) is up."""
    kubernetes_accepted: tuple[bytes, ...] = ()
    """The CAs (PEM) its kube-apiserver accepts client certificates of besides its own (``acceptedCAs``)."""

    @property
    def name(self) -> str:
        """Its Node's name."""
        return self.hostname.lower()
