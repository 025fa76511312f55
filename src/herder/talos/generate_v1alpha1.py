"""The legacy ``v1alpha1`` document of a machine config, as Talos's generator fills it per version contract.

Each contract moves settings out of this document into typed documents (``generate_documents``): network
and registry settings at 1.12, KubeSpan at 1.13, and nearly all Kubernetes settings at 1.14. Keys are
added in the order of Talos's Go structs so the output reads like Talos's own.
"""

from __future__ import annotations

from typing import Any

from herder.talos.generate_input import (
    KUBEPRISM_PORT,
    LABEL_EXCLUDE_FROM_EXTERNAL_LB,
    POD_SUBNET,
    SERVICE_SUBNET,
    ConfigInput,
    MachineType,
    audit_policy,
    endpoint_host,
    kubelet_image,
    kubernetes_image,
    pod_security_configuration,
)
from herder.talos.pki import b64_pair, b64encode


def v1alpha1_document(inp: ConfigInput, machine_type: MachineType) -> dict[str, Any]:
    return {
        "version": "v1alpha1",
        "debug": False,
        "persist": True,
        "machine": _machine(inp, machine_type),
        "cluster": _cluster(inp, machine_type),
    }


def _machine(inp: ConfigInput, machine_type: MachineType) -> dict[str, Any]:
    contract = inp.contract
    legacy_kubernetes = not contract.at_least(1, 14)
    machine: dict[str, Any] = {
        "type": str(machine_type),
        "token": inp.secrets.trustd_token,
        "ca": b64_pair(inp.secrets.os, with_key=machine_type is MachineType.CONTROLPLANE),
    }
    if inp.accepted_talos_cas:
        machine["acceptedCAs"] = [{"crt": b64encode(crt)} for crt in inp.accepted_talos_cas]
    machine["certSANs"] = list(inp.additional_sans)
    if legacy_kubernetes:
        machine["kubelet"] = {
            "image": kubelet_image(inp),
            "defaultRuntimeSeccompProfileEnabled": True,
            "disableManifestsDirectory": True,
        }
        if not contract.at_least(1, 13):
            # Before KubeSpanConfig existed, the generator always wrote machine.network, empty or with KubeSpan.
            machine["network"] = {} if inp.kubespan is None else {"kubespan": {"enabled": inp.kubespan}}
        machine["install"] = _install(inp)
        if inp.sysctls:
            machine["sysctls"] = dict(inp.sysctls)
        if inp.registry_mirrors and not contract.at_least(1, 12):
            machine["registries"] = {
                "mirrors": {
                    host: {"endpoints": list(inp.registry_mirrors[host])}
                    for host in sorted(inp.registry_mirrors)
                }
            }
    machine["features"] = _features(inp)
    if legacy_kubernetes and machine_type is MachineType.CONTROLPLANE:
        machine["nodeLabels"] = {LABEL_EXCLUDE_FROM_EXTERNAL_LB: ""}
    return machine


def _install(inp: ConfigInput) -> dict[str, Any]:
    install: dict[str, Any] = {}
    if inp.install_disk:
        install["disk"] = inp.install_disk
    if inp.install_extra_kernel_args:
        install["extraKernelArgs"] = list(inp.install_extra_kernel_args)
    if inp.install_image:
        install["image"] = inp.install_image
    install["wipe"] = False
    if inp.contract.at_least(1, 12):
        install["grubUseUKICmdline"] = True
    return install


def _features(inp: ConfigInput) -> dict[str, Any]:
    features: dict[str, Any] = {}
    if not inp.contract.at_least(1, 12):
        features.update(rbac=True, stableHostname=True, apidCheckExtKeyUsage=True)
    features["diskQuotaSupport"] = True
    if not inp.contract.at_least(1, 14):
        features["kubePrism"] = {"enabled": True, "port": KUBEPRISM_PORT}
        features["hostDNS"] = {"enabled": True, "forwardKubeDNSToHost": True}
    return features


def _cluster(inp: ConfigInput, machine_type: MachineType) -> dict[str, Any]:
    s = inp.secrets
    control_plane = machine_type is MachineType.CONTROLPLANE
    if inp.contract.at_least(1, 14):
        cluster: dict[str, Any] = {"token": s.bootstrap_token}
        if control_plane:
            cluster["etcd"] = {"ca": b64_pair(s.etcd)}
        return cluster

    endpoint: dict[str, Any] = {"endpoint": inp.endpoint}
    if control_plane and inp.local_api_server_port:
        endpoint["localAPIServerPort"] = inp.local_api_server_port
    network: dict[str, Any] = {}
    if inp.custom_cni_url:
        network["cni"] = {"name": "custom", "urls": [inp.custom_cni_url]}
    network.update(dnsDomain=inp.dns_domain, podSubnets=[POD_SUBNET], serviceSubnets=[SERVICE_SUBNET])
    cluster = {
        "id": s.cluster_id,
        "secret": s.cluster_secret,
        "controlPlane": endpoint,
        "clusterName": inp.cluster_name,
        "network": network,
        "token": s.bootstrap_token,
    }
    accepted = [{"crt": b64encode(crt)} for crt in inp.accepted_kubernetes_cas]
    if not control_plane:
        cluster["ca"] = b64_pair(s.k8s, with_key=False)
        if accepted:
            cluster["acceptedCAs"] = accepted
        cluster["discovery"] = _discovery(inp)
        return cluster

    if s.aescbc_encryption_secret:
        cluster["aescbcEncryptionSecret"] = s.aescbc_encryption_secret
    if s.secretbox_encryption_secret:
        cluster["secretboxEncryptionSecret"] = s.secretbox_encryption_secret
    cluster["ca"] = b64_pair(s.k8s)
    if accepted:
        cluster["acceptedCAs"] = accepted
    cluster["aggregatorCA"] = b64_pair(s.k8s_aggregator)
    cluster["serviceAccount"] = {"key": b64encode(s.k8s_service_account_key)}
    cluster["apiServer"] = _api_server(inp)
    cluster["controllerManager"] = {"image": kubernetes_image("kube-controller-manager", inp)}
    cluster["proxy"] = {"image": kubernetes_image("kube-proxy", inp)}
    cluster["scheduler"] = {"image": kubernetes_image("kube-scheduler", inp)}
    cluster["discovery"] = _discovery(inp)
    cluster["etcd"] = {"ca": b64_pair(s.etcd)}
    if inp.allow_scheduling_on_control_planes:
        cluster["allowSchedulingOnControlPlanes"] = True
    return cluster


def _api_server(inp: ConfigInput) -> dict[str, Any]:
    api_server: dict[str, Any] = {"image": kubernetes_image("kube-apiserver", inp)}
    # Until contract 1.12 the generator also put the endpoint's host among the API server's SANs.
    sans = ([] if inp.contract.at_least(1, 12) else [endpoint_host(inp.endpoint)]) + list(inp.additional_sans)
    if sans:
        api_server["certSANs"] = sans
    if not inp.contract.at_least(1, 12):
        api_server["disablePodSecurityPolicy"] = True
    api_server["admissionControl"] = [{"name": "PodSecurity", "configuration": pod_security_configuration()}]
    api_server["auditPolicy"] = audit_policy()
    return api_server


def _discovery(inp: ConfigInput) -> dict[str, Any]:
    return {
        "enabled": inp.discovery,
        "registries": {"kubernetes": {"disabled": True}, "service": {}},
    }
