"""What the emulated Kubernetes components of a cluster need to know of a machine's config: images and
versions, node registration, labels and taints, which add-ons run, the API server's SANs, the networks.

The machine layer reads these facts out of a config (``machine.kube_config``); the cluster's kubelets,
static pods and add-ons act on them (``sync``, ``manifests``).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

DEFAULT_KUBERNETES_VERSION = "1.32.0"


@dataclass(frozen=True)
class KubeFacts:
    kubelet_image: str
    apiserver_image: str
    controller_manager_image: str
    scheduler_image: str
    proxy_image: str
    coredns_image: str
    register_node: bool
    labels: tuple[tuple[str, str], ...]
    taints: tuple[tuple[str, str, str], ...]
    """(key, value, effect)"""
    apiserver_sans: tuple[str, ...]
    proxy: bool
    coredns: bool
    flannel: bool
    controller_manager: bool
    scheduler: bool
    dns_domain: str
    service_subnet: str
    pod_subnet: str
    bootstrap_token: str
    inline_manifests: tuple[str, ...] = ()
    """The contents of the config's ``cluster.inlineManifests`` (multi-document YAML each)."""
    encryption_keys: tuple[tuple[str, str], ...] = ()
    """The keys kube-apiserver encrypts Secrets with, (name, base64 secret), the writing one first."""

    @property
    def kubelet_version(self) -> str:
        return image_version(self.kubelet_image) or "v" + DEFAULT_KUBERNETES_VERSION

    @property
    def apiserver_version(self) -> str:
        return image_version(self.apiserver_image) or self.kubelet_version

    def service_ip(self, index: int) -> str:
        """The ``index``-th address of the service network (1: the ``kubernetes`` Service, 10: kube-dns)."""
        network = ipaddress.ip_network(self.service_subnet, strict=False)
        return str(network.network_address + index)


def image_version(image: str) -> str:
    """The tag of an image reference (``v1.32.0``), or empty."""
    tail = image.rsplit("/", 1)[-1]
    return tail.partition(":")[2].partition("@")[0] if ":" in tail else ""
