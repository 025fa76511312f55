"""Talos's cross-field rules of a machine config: what its JSON schema cannot say.

They follow Talos's own validation (``v1alpha1.Config.Validate``, each document's
``V1Alpha1ConflictValidate``, ``container.New`` and ``validateContainer``) in the form a client can check
without a running machine: the legacy v1alpha1 document's required sections and per-machine-type rules,
documents that may not repeat or conflict, multi-document kinds that may not be combined with the legacy
field they supersede, and rules spanning documents (KubeSpan needs discovery, discovery needs an
identity, control-plane-only documents).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from herder.talos.documents import LEGACY_KIND


@dataclass(frozen=True)
class ConfigIssue:
    """One problem of a config: the document (``v1alpha1``, a kind, or ``kind/name``), the path inside it
    (dotted, list indices in brackets; empty for the whole document) and the reason."""

    document: str
    path: str
    reason: str

    def __str__(self) -> str:
        where = f"{self.document} {self.path}" if self.path else self.document
        return f"{where}: {self.reason}"


@dataclass(frozen=True)
class TypedDocument:
    kind: str
    name: str
    body: dict[str, Any]

    @property
    def label(self) -> str:
        return f"{self.kind}/{self.name}" if self.name else self.kind


def _set(value: Any) -> bool:
    """Whether a field counts as configured: Talos tests pointers for nil, strings and bools for zero."""
    return value not in (None, "", False)


def _get(tree: Any, dotted: str) -> Any:
    for segment in dotted.split("."):
        if not isinstance(tree, dict):
            return None
        tree = tree.get(segment)
    return tree


def _nonempty(tree: Any, dotted: str) -> bool:
    return bool(_get(tree, dotted))


# Each multi-document kind and the legacy fields it supersedes: both set is a conflict.
_SUPERSEDES: dict[str, tuple[str, ...]] = {
    "DiscoveryIdentityConfig": ("cluster.id", "cluster.secret"),
    "DiscoveryServiceConfig": ("cluster.discovery",),
    "CRIBaseRuntimeSpecConfig": ("machine.baseRuntimeSpecOverrides",),
    "ImageCacheConfig": ("machine.features.imageCache",),
    "KubeAggregatorCAConfig": ("cluster.aggregatorCA",),
    "KubeAPIServerConfig": ("cluster.apiServer", "cluster.controlPlane.localAPIServerPort"),
    "KubeAPIServerCAConfig": ("cluster.ca",),
    "KubeClusterConfig": ("cluster.clusterName", "cluster.controlPlane.endpoint"),
    "KubeControllerManagerConfig": ("cluster.controllerManager", "machine.controlPlane.controllerManager"),
    "KubeCoreDNSConfig": ("cluster.coreDNS",),
    "KubeCredentialProviderConfig": ("machine.kubelet",),
    "KubeEtcdEncryptionConfig": ("cluster.secretboxEncryptionSecret", "cluster.aescbcEncryptionSecret"),
    "KubeFlannelCNIConfig": ("cluster.network",),
    "KubeletConfig": ("machine.kubelet",),
    "KubePrismConfig": ("machine.features.kubePrism",),
    "KubeNetworkConfig": ("cluster.network",),
    "KubeNodeConfig": (
        "cluster.allowSchedulingOnControlPlanes",
        "cluster.allowSchedulingOnMasters",
        "machine.kubelet.skipNodeRegistration",
        "machine.kubelet.registerWithFQDN",
        "machine.kubelet.nodeIP",
        "machine.nodeLabels",
        "machine.nodeAnnotations",
        "machine.nodeTaints",
    ),
    "KubeProxyConfig": ("cluster.proxy",),
    "KubeSchedulerConfig": ("cluster.scheduler", "machine.controlPlane.scheduler"),
    "KubeServiceAccountConfig": ("cluster.serviceAccount",),
    "KubeTalosAPIAccessConfig": ("machine.features.kubernetesTalosAPIAccess",),
    "HostnameConfig": ("machine.network.hostname", "machine.features.stableHostname"),
    "KubeSpanConfig": ("machine.network.kubespan",),
    "ResolverConfig": (
        "machine.network.searchDomains",
        "machine.network.nameservers",
        "machine.network.disableSearchDomain",
    ),
    "TimeSyncConfig": ("machine.time.disabled", "machine.time.servers", "machine.time.bootTimeout"),
    "UnattendedInstallConfig": ("machine.install",),
}

# Legacy fields Talos counts as configured only when they hold something (maps and lists).
_SUPERSEDED_IF_NONEMPTY = {
    "KubeAdmissionControlConfig": ("cluster.apiServer.admissionControl",),
    "KubeAuthorizerConfig": ("cluster.apiServer.admissionControl",),
    "KubeAuditPolicyConfig": ("cluster.apiServer.auditPolicy",),
}

_CONTROL_PLANE_ONLY = frozenset(
    {
        "KubeAdmissionControlConfig",
        "KubeAggregatorCAConfig",
        "KubeAPIServerConfig",
        "KubeAuditPolicyConfig",
        "KubeAuthenticationConfig",
        "KubeAuthorizerConfig",
        "KubeControllerManagerConfig",
        "KubeCoreDNSConfig",
        "KubeEtcdEncryptionConfig",
        "KubeFlannelCNIConfig",
        "KubeProxyConfig",
        "KubeSchedulerConfig",
        "KubeServiceAccountConfig",
        "KubeTalosAPIAccessConfig",
    }
)

_LINK_KINDS = (
    "BondConfig",
    "BridgeConfig",
    "DummyLinkConfig",
    "LinkConfig",
    "VethConfig",
    "VLANConfig",
    "VRFConfig",
    "WireguardConfig",
)
# Kinds that may not share a name with each other (Talos's ``ConflictsWithKinds``).
_CONFLICTING_KINDS: tuple[frozenset[str], ...] = (
    frozenset(_LINK_KINDS),
    frozenset({"ExistingVolumeConfig", "UserVolumeConfig"}),
    frozenset({"Layer2VIPConfig", "HCloudVIPConfig"}),
)

_MACHINE_TYPES = ("controlplane", "worker", "init")
_ROLES = frozenset(
    f"os:{r}"
    for r in ("admin", "operator", "reader", "etcd:backup", "image:verifier", "meta:writer", "impersonator")
)
_DNS_NAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)

_Rule = Callable[[dict[str, Any] | None, list[TypedDocument]], Iterator[ConfigIssue]]


def cross_field_issues(legacy: dict[str, Any] | None, typed: list[TypedDocument]) -> list[ConfigIssue]:
    """Every cross-field issue of a config made of its legacy document (if any) and typed documents."""
    return [issue for rule in _RULES for issue in rule(legacy, typed)]


def _legacy_document(legacy: dict[str, Any] | None, typed: list[TypedDocument]) -> Iterator[ConfigIssue]:
    if legacy is None:
        yield ConfigIssue(LEGACY_KIND, "", "the machine configuration has no v1alpha1 document")
        return
    machine, cluster = legacy.get("machine"), legacy.get("cluster")
    if not isinstance(machine, dict):
        yield ConfigIssue(LEGACY_KIND, "machine", "machine instructions are required")
        return
    if not isinstance(cluster, dict):
        yield ConfigIssue(LEGACY_KIND, "cluster", "cluster instructions are required")
    machine_type = machine.get("type")
    if machine_type not in _MACHINE_TYPES:
        # The schema names the valid types; the rules below depend on the type.
        return
    yield from _legacy_security(machine, cluster, machine_type != "worker")
    yield from _legacy_cluster(cluster, machine_type != "worker")
    yield from _legacy_machine(machine, machine_type != "worker")


def _legacy_security(machine: dict[str, Any], cluster: Any, control_plane: bool) -> Iterator[ConfigIssue]:
    ca = machine.get("ca")
    if not _set(ca) and not machine.get("acceptedCAs"):
        yield ConfigIssue(LEGACY_KIND, "machine.ca", "issuing CA or some accepted CAs are required")
    if control_plane:
        if not _set(ca):
            yield ConfigIssue(LEGACY_KIND, "machine.ca", "issuing CA is required on control plane machines")
        elif not _get(ca, "key"):
            yield ConfigIssue(
                LEGACY_KIND, "machine.ca.key", "issuing CA key is required on control plane machines"
            )
        return
    if _get(ca, "key"):
        yield ConfigIssue(LEGACY_KIND, "machine.ca.key", "issuing Talos API CA key is not allowed on workers")
    if _set(ca) and not _get(ca, "crt") and not machine.get("acceptedCAs"):
        yield ConfigIssue(LEGACY_KIND, "machine.ca.crt", "trusted CA certificates are required on workers")
    if _get(cluster, "ca.key"):
        yield ConfigIssue(LEGACY_KIND, "cluster.ca.key", "Kubernetes CA key is not allowed on workers")
    if _set(_get(cluster, "etcd")):
        yield ConfigIssue(
            LEGACY_KIND, "cluster.etcd", "etcd config is only allowed on control plane machines"
        )


def _legacy_cluster(cluster: Any, control_plane: bool) -> Iterator[ConfigIssue]:
    if not isinstance(cluster, dict):
        return
    control = cluster.get("controlPlane")
    if _set(control):
        endpoint = _get(control, "endpoint")
        if not _set(endpoint):
            yield ConfigIssue(
                LEGACY_KIND, "cluster.controlPlane.endpoint", "cluster controlplane endpoint is required"
            )
        elif not _valid_url(endpoint, ("http", "https")):
            yield ConfigIssue(
                LEGACY_KIND, "cluster.controlPlane.endpoint", f"invalid controlplane endpoint {endpoint!r}"
            )
    domain = _get(cluster, "network.dnsDomain")
    if _set(domain) and not (isinstance(domain, str) and _DNS_NAME.match(domain)):
        yield ConfigIssue(LEGACY_KIND, "cluster.network.dnsDomain", f"{domain!r} is not a valid DNS name")
    cni = _get(cluster, "network.cni")
    if control_plane and isinstance(cni, dict):
        name = cni.get("name")
        if name not in ("flannel", "custom", "none"):
            yield ConfigIssue(
                LEGACY_KIND,
                "cluster.network.cni.name",
                'cni name should be one of "flannel", "custom", "none"',
            )
        elif name != "custom" and cni.get("urls"):
            yield ConfigIssue(
                LEGACY_KIND, "cluster.network.cni.urls", f'"urls" field should be empty for "{name}" CNI'
            )
    manifests = cluster.get("inlineManifests") or []
    names = [m.get("name") if isinstance(m, dict) else None for m in manifests]
    for index, name in enumerate(names):
        path = f"cluster.inlineManifests[{index}].name"
        if not name:
            yield ConfigIssue(LEGACY_KIND, path, "inline manifest name can't be empty")
        elif name in names[:index]:
            yield ConfigIssue(LEGACY_KIND, path, f"inline manifest name {name!r} is duplicate")
    discovery = cluster.get("discovery")
    if _get(discovery, "enabled") is True and _get(discovery, "registries.service.disabled") is not True:
        for field in ("id", "secret"):
            if not _set(cluster.get(field)):
                yield ConfigIssue(
                    LEGACY_KIND, f"cluster.{field}", f"cluster discovery service requires .cluster.{field}"
                )


def _legacy_machine(machine: dict[str, Any], control_plane: bool) -> Iterator[ConfigIssue]:
    host_dns = _get(machine, "features.hostDNS")
    if _get(host_dns, "forwardKubeDNSToHost") is True and _get(host_dns, "enabled") is not True:
        yield ConfigIssue(
            LEGACY_KIND,
            "machine.features.hostDNS",
            "forwardKubeDNSToHost requires hostDNS.enabled to be true",
        )
    api_access = _get(machine, "features.kubernetesTalosAPIAccess")
    if _get(api_access, "enabled") is True:
        path = "machine.features.kubernetesTalosAPIAccess"
        if not control_plane:
            yield ConfigIssue(
                LEGACY_KIND, path, "Kubernetes Talos API access can only be enabled on control planes"
            )
        for role in _get(api_access, "allowedRoles") or []:
            if role not in _ROLES:
                yield ConfigIssue(LEGACY_KIND, f"{path}.allowedRoles", f"invalid role {role!r}")
    interfaces = _get(machine, "network.interfaces") or []
    for index, device in enumerate(interfaces):
        if not isinstance(device, dict):
            continue
        path = f"machine.network.interfaces[{index}]"
        if _set(device.get("bond")) and _set(device.get("bridge")):
            yield ConfigIssue(LEGACY_KIND, path, "interface has both bridge and bond sections set")
        vlan_vips = [v for v in device.get("vlans") or [] if isinstance(v, dict) and _set(v.get("vip"))]
        if not control_plane and (_set(device.get("vip")) or vlan_vips):
            yield ConfigIssue(
                LEGACY_KIND, path, "virtual (shared) IP is not allowed on non-controlplane nodes"
            )


def _superseded(legacy: dict[str, Any] | None, typed: list[TypedDocument]) -> Iterator[ConfigIssue]:
    if legacy is None:
        return
    for doc in typed:
        conflicting = [path for path in _SUPERSEDES.get(doc.kind, ()) if _set(_get(legacy, path))]
        conflicting += [path for path in _SUPERSEDED_IF_NONEMPTY.get(doc.kind, ()) if _nonempty(legacy, path)]
        for path in conflicting:
            yield ConfigIssue(
                doc.label, "", f"conflicts with .{path} of the v1alpha1 document; configure only one"
            )


def _unique(legacy: dict[str, Any] | None, typed: list[TypedDocument]) -> Iterator[ConfigIssue]:
    seen: set[tuple[str, str]] = set()
    for doc in typed:
        if (doc.kind, doc.name) in seen:
            yield ConfigIssue(doc.label, "", "duplicate document")
        seen.add((doc.kind, doc.name))
        for group in _CONFLICTING_KINDS:
            if doc.kind not in group:
                continue
            clash = next((k for k in sorted(group - {doc.kind}) if (k, doc.name) in seen), None)
            if clash:
                yield ConfigIssue(doc.label, "", f"conflicts with document {clash}/{doc.name}")


def _across_documents(legacy: dict[str, Any] | None, typed: list[TypedDocument]) -> Iterator[ConfigIssue]:
    kinds = {doc.kind: doc for doc in typed}
    machine_type = _get(legacy, "machine.type")
    discovery_docs = [doc for doc in typed if doc.kind == "DiscoveryServiceConfig"]
    discovery = bool(discovery_docs) or _get(legacy, "cluster.discovery.enabled") is True
    identity = kinds.get("DiscoveryIdentityConfig")
    if discovery_docs:
        for field, legacy_field in (("clusterID", "id"), ("clusterSecret", "secret")):
            if not _set(_get(identity.body if identity else None, field)) and not _set(
                _get(legacy, f"cluster.{legacy_field}")
            ):
                yield ConfigIssue(
                    discovery_docs[0].label,
                    "",
                    f"cluster discovery needs the cluster {legacy_field} (DiscoveryIdentityConfig.{field} "
                    f"or .cluster.{legacy_field})",
                )
    kubespan = kinds.get("KubeSpanConfig")
    kubespan_on = _get(
        kubespan.body if kubespan else legacy, "enabled" if kubespan else "machine.network.kubespan.enabled"
    )
    if kubespan_on is True and not discovery:
        yield ConfigIssue(
            kubespan.label if kubespan else LEGACY_KIND,
            "" if kubespan else "machine.network.kubespan",
            "KubeSpan requires cluster discovery to be enabled",
        )
    if machine_type != "worker" and "KubeAPIServerCAConfig" in kinds:
        legacy_encryption = any(
            _set(_get(legacy, f"cluster.{f}"))
            for f in ("secretboxEncryptionSecret", "aescbcEncryptionSecret")
        )
        if not legacy_encryption and "KubeEtcdEncryptionConfig" not in kinds:
            yield ConfigIssue(
                "KubeAPIServerCAConfig", "", "etcd encryption config is required on control plane machines"
            )
    if machine_type == "worker":
        for doc in typed:
            if doc.kind in _CONTROL_PLANE_ONLY:
                yield ConfigIssue(
                    doc.label, "", "this document kind is only allowed on control plane machines"
                )


def _valid_url(value: Any, schemes: tuple[str, ...]) -> bool:
    if not isinstance(value, str):
        return False
    try:
        parts = urlsplit(value)
        return parts.scheme in schemes and bool(parts.hostname) and (parts.port is None or parts.port > 0)
    except ValueError:
        return False


_RULES: tuple[_Rule, ...] = (_legacy_document, _superseded, _unique, _across_documents)
