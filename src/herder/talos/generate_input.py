"""What a machine config is generated from: the typed, validated inputs of ``talosctl gen config``."""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from herder.talos.contracts import VersionContract
from herder.talos.secrets import SecretsBundle

_KUBERNETES_VERSION = re.compile(r"^\d+\.\d+\.\d+(?:-[0-9A-Za-z.\-]+)?(?:\+[0-9A-Za-z.\-]+)?$")


class GenerateError(ValueError):
    """Inputs a machine config cannot be generated from."""


class MachineType(enum.StrEnum):
    CONTROLPLANE = "controlplane"
    WORKER = "worker"


def parse_kubernetes_version(version: str) -> str:
    """``1.28.0`` from ``1.28.0`` or ``v1.28.0``; refuses anything that is not X.Y.Z[-pre]."""
    bare = version.strip().removeprefix("v")
    if not _KUBERNETES_VERSION.match(bare):
        raise GenerateError(f"invalid Kubernetes version {version!r}: expected X.Y.Z, e.g. 1.32.4")
    return bare


def endpoint_host(endpoint: str) -> str:
    """The host of an endpoint URL as Go's ``URL.Hostname`` gives it (brackets and port removed, case kept)."""
    netloc = urlsplit(endpoint).netloc.rpartition("@")[2]
    if netloc.startswith("["):
        return netloc[1:].partition("]")[0]
    host, sep, port = netloc.rpartition(":")
    return host if sep and port.isdigit() else netloc


def validate_endpoint(endpoint: str) -> str:
    """The control plane endpoint must be an https URL with a host, as ``talosctl gen config`` demands."""
    try:
        parts = urlsplit(endpoint)
        _ = parts.port  # parsing the port is what checks it
    except ValueError as e:
        raise GenerateError(f"invalid cluster endpoint {endpoint!r}: {e}") from None
    if parts.scheme != "https":
        raise GenerateError(
            f"invalid cluster endpoint {endpoint!r}: the scheme must be https, e.g. https://host:6443"
        )
    if not endpoint_host(endpoint):
        raise GenerateError(f"invalid cluster endpoint {endpoint!r}: no host")
    return endpoint


@dataclass(frozen=True)
class ConfigInput:
    """The inputs of one cluster's machine configs, for one version contract.

    ``kubespan`` is tri-state as in Talos: ``None`` leaves KubeSpan out of the config entirely.
    """

    cluster_name: str
    endpoint: str
    kubernetes_version: str
    contract: VersionContract
    secrets: SecretsBundle
    additional_sans: Sequence[str] = ()
    allow_scheduling_on_control_planes: bool = False
    dns_domain: str = "cluster.local"
    install_disk: str = ""
    install_image: str = ""
    install_extra_kernel_args: Sequence[str] = ()
    local_api_server_port: int = 0
    sysctls: Mapping[str, str] = field(default_factory=dict)
    custom_cni_url: str = ""
    registry_mirrors: Mapping[str, Sequence[str]] = field(default_factory=dict)
    kubespan: bool | None = None
    discovery: bool = True
    accepted_talos_cas: Sequence[bytes] = ()
    """PEM CA certificates the Talos API accepts besides the issuing one (``machine.acceptedCAs``)."""
    accepted_kubernetes_cas: Sequence[bytes] = ()
    """PEM CA certificates Kubernetes accepts besides the issuing one (``cluster.acceptedCAs``)."""

    def __post_init__(self) -> None:
        if not self.cluster_name.strip():
            raise GenerateError("cluster name must not be empty")
        validate_endpoint(self.endpoint)
        object.__setattr__(self, "kubernetes_version", parse_kubernetes_version(self.kubernetes_version))
        if not 0 <= self.local_api_server_port <= 65535:
            raise GenerateError(f"invalid local API server port {self.local_api_server_port}")
        if self.custom_cni_url and urlsplit(self.custom_cni_url).scheme not in ("http", "https"):
            raise GenerateError(f"invalid custom CNI URL {self.custom_cni_url!r}: expected an http(s) URL")
        if self.kubespan and not self.discovery:
            raise GenerateError("KubeSpan requires cluster discovery to be enabled")
        for host, endpoints in self.registry_mirrors.items():
            if not host or not endpoints:
                raise GenerateError(
                    f"invalid registry mirror {host!r}: expected a host and at least one endpoint"
                )


# Defaults Talos's generator fills in, shared by the legacy v1alpha1 document and the typed documents.
POD_SUBNET = "10.244.0.0/16"
SERVICE_SUBNET = "10.96.0.0/12"
KUBEPRISM_PORT = 7445
DISCOVERY_SERVICE_ENDPOINT = "https://discovery.talos.dev/"
LABEL_CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
LABEL_EXCLUDE_FROM_EXTERNAL_LB = "node.kubernetes.io/exclude-from-external-load-balancers"


def kubelet_image(inp: ConfigInput) -> str:
    return f"ghcr.io/siderolabs/kubelet:v{inp.kubernetes_version}"


def kubernetes_image(component: str, inp: ConfigInput) -> str:
    """The upstream image of a control plane component (``kube-apiserver``, ``kube-proxy``…)."""
    return f"registry.k8s.io/{component}:v{inp.kubernetes_version}"


def pod_security_configuration() -> dict[str, object]:
    """The PodSecurity admission plugin configuration Talos enables by default."""
    return {
        "apiVersion": "pod-security.admission.config.k8s.io/v1alpha1",
        "defaults": {
            "audit": "restricted",
            "audit-version": "latest",
            "enforce": "baseline",
            "enforce-version": "latest",
            "warn": "restricted",
            "warn-version": "latest",
        },
        "exemptions": {"namespaces": ["kube-system"], "runtimeClasses": [], "usernames": []},
        "kind": "PodSecurityConfiguration",
    }


def audit_policy() -> dict[str, object]:
    return {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [{"level": "Metadata"}]}
