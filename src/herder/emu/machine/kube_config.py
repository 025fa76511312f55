"""What a machine config says about Kubernetes (``KubeFacts``), as an emulated machine's kubelet and control
plane read it: images and versions, node registration, labels and taints, which add-ons run, the API
server's SANs.

Both forms are read: the v1alpha1 document's ``machine``/``cluster`` sections (contracts before 1.14) and
the typed ``Kube*Config`` documents that replace them. Facts are computed once per config (configs are
interned by digest, so a thousand machines with one config cost one read).
"""

from __future__ import annotations

import weakref
from typing import Any

from herder.emu.cluster.kube_facts import DEFAULT_KUBERNETES_VERSION, KubeFacts, image_version
from herder.emu.machine.config import MachineConfig
from herder.talos.documents import is_legacy
from herder.talos.generate_input import LABEL_CONTROL_PLANE, LABEL_EXCLUDE_FROM_EXTERNAL_LB, endpoint_host

CONTROL_PLANE_TAINT = (LABEL_CONTROL_PLANE, "", "NoSchedule")


_facts: weakref.WeakKeyDictionary[MachineConfig, KubeFacts] = weakref.WeakKeyDictionary()


def kube_facts(config: MachineConfig) -> KubeFacts:
    facts = _facts.get(config)
    if facts is None:
        facts = _facts[config] = _read(config)
    return facts


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _enabled(document: dict[str, Any] | None, *, legacy_disabled: Any) -> bool:
    """A typed document's ``enabled`` (absent document: off), else the legacy ``disabled`` flag."""
    if document is None:
        return legacy_disabled is not True
    return document.get("enabled", True) is not False


def _read(config: MachineConfig) -> KubeFacts:
    documents = [d for d in config.documents() if isinstance(d, dict)]
    legacy = next((d for d in documents if is_legacy(d)), {})
    typed = {str(d.get("kind")): d for d in documents if not is_legacy(d)}
    machine, cluster = _map(legacy.get("machine")), _map(legacy.get("cluster"))
    kubelet = _map(machine.get("kubelet"))
    node = typed.get("KubeNodeConfig")
    kubelet_doc = _map(typed.get("KubeletConfig"))
    version = "v" + DEFAULT_KUBERNETES_VERSION

    def image(typed_kind: str, legacy_section: str, component: str) -> str:
        found = _map(typed.get(typed_kind)).get("image") or _map(cluster.get(legacy_section)).get("image")
        return str(found or f"registry.k8s.io/{component}:{version}")

    kubelet_image = str(kubelet_doc.get("image") or kubelet.get("image") or "")
    version = image_version(kubelet_image) or version
    extra_args = {**_map(kubelet.get("extraArgs")), **_map(kubelet_doc.get("extraArgs"))}
    skip = _map(node).get("skipNodeRegistration", kubelet.get("skipNodeRegistration"))
    register = skip is not True and str(extra_args.get("register-node", "true")).lower() != "false"

    if node is not None:
        labels = {str(k): str(v or "") for k, v in _map(node.get("labels")).items()}
        taints = [_taint(k, v) for k, v in _map(node.get("taints")).items()]
    else:
        labels = {str(k): str(v or "") for k, v in _map(machine.get("nodeLabels")).items()}
        taints = [_taint(k, v) for k, v in _map(machine.get("nodeTaints")).items()]
        if config.is_control_plane:
            # Before the typed documents, Talos itself labels control planes and, unless scheduling on
            # them is allowed, taints them.
            labels = {LABEL_CONTROL_PLANE: "", LABEL_EXCLUDE_FROM_EXTERNAL_LB: "", **labels}
            allow = cluster.get("allowSchedulingOnControlPlanes", cluster.get("allowSchedulingOnMasters"))
            if allow is not True and all(t[0] != LABEL_CONTROL_PLANE for t in taints):
                taints.append(CONTROL_PLANE_TAINT)

    network = {**_map(cluster.get("network")), **_map(typed.get("KubeNetworkConfig"))}
    cni = _map(network.get("cni")).get("name") or "flannel"
    flannel = "KubeFlannelCNIConfig" in typed if "KubeNetworkConfig" in typed else cni == "flannel"
    sans = [
        endpoint_host(config.endpoint) if config.endpoint else "",
        *(_map(cluster.get("apiServer")).get("certSANs") or ()),
        *(_map(typed.get("KubeAPIServerConfig")).get("certExtraSANs") or ()),
    ]
    legacy_cp = _map(machine.get("controlPlane"))
    typed_form = "KubeClusterConfig" in typed
    return KubeFacts(
        kubelet_image=kubelet_image or f"ghcr.io/siderolabs/kubelet:{version}",
        apiserver_image=image("KubeAPIServerConfig", "apiServer", "kube-apiserver"),
        controller_manager_image=image(
            "KubeControllerManagerConfig", "controllerManager", "kube-controller-manager"
        ),
        scheduler_image=image("KubeSchedulerConfig", "scheduler", "kube-scheduler"),
        proxy_image=image("KubeProxyConfig", "proxy", "kube-proxy"),
        coredns_image=str(
            _map(typed.get("KubeCoreDNSConfig")).get("image")
            or _map(cluster.get("coreDNS")).get("image")
            or "registry.k8s.io/coredns/coredns:v1.12.1"
        ),
        register_node=register,
        # cluster.inlineManifests until 1.14, KubeInlineManifestConfig documents (one per manifest) since.
        inline_manifests=(
            *(
                str(m.get("contents") or "")
                for m in cluster.get("inlineManifests") or ()
                if isinstance(m, dict)
            ),
            *(str(d.get("manifest") or "") for d in documents if d.get("kind") == "KubeInlineManifestConfig"),
        ),
        labels=tuple(sorted(labels.items())),
        taints=tuple(taints),
        apiserver_sans=tuple(dict.fromkeys(str(s) for s in sans if s)),
        proxy=_enabled(
            typed.get("KubeProxyConfig") if typed_form else None,
            legacy_disabled=_map(cluster.get("proxy")).get("disabled"),
        ),
        coredns=_enabled(
            typed.get("KubeCoreDNSConfig") if typed_form else None,
            legacy_disabled=_map(cluster.get("coreDNS")).get("disabled"),
        ),
        flannel=flannel,
        controller_manager=_enabled(
            typed.get("KubeControllerManagerConfig") if typed_form else None,
            legacy_disabled=_map(legacy_cp.get("controllerManager")).get("disabled"),
        ),
        scheduler=_enabled(
            typed.get("KubeSchedulerConfig") if typed_form else None,
            legacy_disabled=_map(legacy_cp.get("scheduler")).get("disabled"),
        ),
        dns_domain=str(network.get("dnsDomain") or "cluster.local"),
        service_subnet=str((network.get("serviceSubnets") or ["10.96.0.0/12"])[0]),
        pod_subnet=str((network.get("podSubnets") or ["10.244.0.0/16"])[0]),
        bootstrap_token=str(cluster.get("token") or ""),
        encryption_keys=_encryption_keys(cluster, typed.get("KubeEtcdEncryptionConfig")),
    )


def _encryption_keys(cluster: dict[str, Any], typed: dict[str, Any] | None) -> tuple[tuple[str, str], ...]:
    """kube-apiserver's keys for Secrets: the typed document's providers in order (contract 1.14 and
    later), or the v1alpha1 secrets as Talos renders them (secretbox ``key2`` first, then aescbc ``key1``)."""
    if typed is not None:
        keys: list[tuple[str, str]] = []
        for resource in _map(typed.get("config")).get("resources") or ():
            if not isinstance(resource, dict) or "secrets" not in (resource.get("resources") or ()):
                continue
            for provider in resource.get("providers") or ():
                for kind in ("secretbox", "aescbc", "aesgcm"):
                    for key in _map(_map(provider).get(kind)).get("keys") or ():
                        if isinstance(key, dict) and key.get("secret"):
                            keys.append((str(key.get("name") or ""), str(key["secret"])))
        return tuple(keys)
    named = (
        ("key2", cluster.get("secretboxEncryptionSecret")),
        ("key1", cluster.get("aescbcEncryptionSecret")),
    )
    return tuple((name, str(secret)) for name, secret in named if secret)


def _taint(key: Any, value: Any) -> tuple[str, str, str]:
    """A taint as Talos writes one: ``key: effect`` or ``key: value:effect``."""
    text = str(value or "")
    taint_value, _, effect = text.rpartition(":")
    return str(key), taint_value, effect or "NoSchedule"
