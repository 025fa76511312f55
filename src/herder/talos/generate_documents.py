"""The typed documents (``apiVersion: v1alpha1`` + ``kind``) that follow the v1alpha1 document in a
generated machine config, in the order Talos's generator emits them for each version contract.

Unlike the v1alpha1 document, these carry certificates and keys as plain PEM strings, not base64.
"""

from __future__ import annotations

import json
from typing import Any

from herder.talos.generate_input import (
    DISCOVERY_SERVICE_ENDPOINT,
    KUBEPRISM_PORT,
    LABEL_CONTROL_PLANE,
    LABEL_EXCLUDE_FROM_EXTERNAL_LB,
    POD_SUBNET,
    SERVICE_SUBNET,
    ConfigInput,
    MachineType,
    audit_policy,
    kubelet_image,
    kubernetes_image,
    pod_security_configuration,
)
from herder.talos.pki import CertificateAndKey

Document = dict[str, Any]


def _doc(kind: str, **fields: Any) -> Document:
    return {"apiVersion": "v1alpha1", "kind": kind, **fields}


def _pem(data: bytes) -> str:
    return data.decode("ascii")


def _issuing_ca(pair: CertificateAndKey) -> dict[str, str]:
    return {"cert": _pem(pair.crt), "key": _pem(pair.key)}


def typed_documents(inp: ConfigInput, machine_type: MachineType) -> list[Document]:
    """Every document after the v1alpha1 one, for ``inp.contract``."""
    c = inp.contract
    docs: list[Document] = []
    if c.at_least(1, 14):
        docs += _machine_documents(inp)
    if c.at_least(1, 12):
        docs += _registry_mirrors(inp)
        docs.append(_doc("HostnameConfig", auto="stable"))
    if c.at_least(1, 13) and inp.kubespan is not None:
        docs.append(_doc("KubeSpanConfig", enabled=inp.kubespan))
    if c.at_least(1, 14):
        docs += _kubernetes_documents(inp, machine_type)
        if machine_type is MachineType.CONTROLPLANE:
            docs += _control_plane_documents(inp)
    return docs


def _machine_documents(inp: ConfigInput) -> list[Document]:
    """Discovery, installation, host DNS, sysctls, storage and isolation: v1alpha1 settings moved out at 1.14."""
    s = inp.secrets
    docs: list[Document] = []
    if inp.discovery:
        docs.append(_doc("DiscoveryServiceConfig", name="default", endpoint=DISCOVERY_SERVICE_ENDPOINT))
    docs.append(_doc("DiscoveryIdentityConfig", clusterID=s.cluster_id, clusterSecret=s.cluster_secret))
    # The unattended install selects its disk with a CEL expression, so without a disk there is no document.
    if inp.install_disk:
        installer = {"image": inp.install_image} if inp.install_image else {}
        docs.append(
            _doc(
                "UnattendedInstallConfig",
                installer=installer,
                provisioning={
                    "diskSelector": {"match": f"disk.dev_path == {json.dumps(inp.install_disk)}"},
                    "wipe": False,
                },
            )
        )
    docs.append(_doc("ResolverConfig", hostDNS={"enabled": True, "forwardKubeDNSToHost": True}))
    if inp.sysctls:
        docs.append(_doc("SysctlConfig", params=dict(inp.sysctls)))
    docs.append(_doc("VolumeConfig", name="EPHEMERAL", mount={"secure": True}))
    docs.append(_doc("FilesystemTrimConfig", interval="168h0m0s"))
    docs.append(_doc("SecurityProfileConfig", workloadIsolation=True))
    return docs


def _registry_mirrors(inp: ConfigInput) -> list[Document]:
    return [
        _doc(
            "RegistryMirrorConfig", name=host, endpoints=[{"url": url} for url in inp.registry_mirrors[host]]
        )
        for host in sorted(inp.registry_mirrors)
    ]


def _kubernetes_documents(inp: ConfigInput, machine_type: MachineType) -> list[Document]:
    """Kubernetes settings every node carries (contract 1.14 and later)."""
    control_plane = machine_type is MachineType.CONTROLPLANE
    node: Document = _doc("KubeNodeConfig", nodeIP={})
    if control_plane:
        node["labels"] = {LABEL_CONTROL_PLANE: "", LABEL_EXCLUDE_FROM_EXTERNAL_LB: ""}
        if not inp.allow_scheduling_on_control_planes:
            node["taints"] = {LABEL_CONTROL_PLANE: "NoSchedule"}
    accepted = [_pem(crt) for crt in inp.accepted_kubernetes_cas]
    ca = (
        _doc("KubeAPIServerCAConfig", issuingCA=_issuing_ca(inp.secrets.k8s))
        if control_plane
        else _doc("KubeAPIServerCAConfig", acceptedCAs=[_pem(inp.secrets.k8s.crt)])
    )
    if accepted:
        ca["acceptedCAs"] = [*ca.get("acceptedCAs", ()), *accepted]
    return [
        _doc("KubeClusterConfig", clusterName=inp.cluster_name, endpoint=inp.endpoint),
        node,
        _doc("KubeletConfig", image=kubelet_image(inp), config={}, defaultRuntimeSeccompProfileEnabled=True),
        _doc(
            "KubeNetworkConfig",
            dnsDomain=inp.dns_domain,
            podSubnets=[POD_SUBNET],
            serviceSubnets=[SERVICE_SUBNET],
        ),
        ca,
        _doc("KubePrismConfig", port=KUBEPRISM_PORT),
    ]


def _encryption_providers(inp: ConfigInput) -> list[Document]:
    # Key names and order match what older contracts rendered for kube-apiserver, so a cluster regenerated
    # with a newer contract can still decrypt its secrets; Talos puts even the aescbc secret under secretbox.
    s = inp.secrets
    named = (("key2", s.secretbox_encryption_secret), ("key1", s.aescbc_encryption_secret))
    return [{"secretbox": {"keys": [{"name": name, "secret": secret}]}} for name, secret in named if secret]


def _control_plane_documents(inp: ConfigInput) -> list[Document]:
    """Control plane components and their secrets (contract 1.14 and later)."""
    s = inp.secrets
    api_server = _doc("KubeAPIServerConfig", image=kubernetes_image("kube-apiserver", inp))
    if inp.local_api_server_port:
        api_server["apiPort"] = inp.local_api_server_port
    if inp.additional_sans:
        api_server["certExtraSANs"] = list(inp.additional_sans)
    docs = [
        _doc("KubeAggregatorCAConfig", issuingCA=_issuing_ca(s.k8s_aggregator)),
        _doc("KubeAdmissionControlConfig", name="PodSecurity", configuration=pod_security_configuration()),
        _doc("KubeAuditPolicyConfig", configuration=audit_policy()),
        _doc(
            "KubeAuthenticationConfig",
            configuration={
                "anonymous": {
                    "conditions": [{"path": "/livez"}, {"path": "/readyz"}, {"path": "/healthz"}],
                    "enabled": True,
                },
                "jwt": [],
            },
        ),
        _doc("KubeAuthorizerConfig", name="node", type="Node"),
        _doc("KubeAuthorizerConfig", name="rbac", type="RBAC"),
        _doc(
            "KubeEtcdEncryptionConfig",
            config={"resources": [{"providers": _encryption_providers(inp), "resources": ["secrets"]}]},
        ),
        _doc(
            "KubeServiceAccountConfig",
            issuer={"privateKey": _pem(s.k8s_service_account_key), "issuerURL": inp.endpoint},
        ),
        api_server,
        _doc("KubeControllerManagerConfig", image=kubernetes_image("kube-controller-manager", inp)),
        _doc("KubeSchedulerConfig", image=kubernetes_image("kube-scheduler", inp), config={}),
        _doc("KubeProxyConfig", image=kubernetes_image("kube-proxy", inp), config={}),
    ]
    if not inp.custom_cni_url:
        docs.append(_doc("KubeFlannelCNIConfig", backendType="vxlan", backendPort=4789))
    docs.append(_doc("KubeCoreDNSConfig", enabled=True))
    if inp.custom_cni_url:
        docs.append(_doc("KubeExternalManifestConfig", name="custom-cni", url=inp.custom_cni_url))
    return docs
