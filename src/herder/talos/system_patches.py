"""Config patches a management plane writes itself for a cluster feature, in the form the cluster's
version contract speaks (the same feature moved between documents across Talos releases)."""

from __future__ import annotations

from herder.talos.contracts import VersionContract
from herder.talos.documents import dump_documents

# Both system partitions, sealed with a key derived from the node's identity (Talos's nodeID key).
_PARTITIONS = ("STATE", "EPHEMERAL")
_KEYS = [{"slot": 0, "nodeID": {}}]


def disk_encryption(contract: VersionContract) -> str:
    """Encrypt STATE and EPHEMERAL with LUKS2: ``machine.systemDiskEncryption`` before 1.11, and
    ``VolumeConfig`` documents from 1.11 on (where the legacy field is gone)."""
    if not contract.at_least(1, 11):
        return dump_documents(
            [
                {
                    "machine": {
                        "systemDiskEncryption": {
                            partition.lower(): {"provider": "luks2", "keys": _KEYS}
                            for partition in _PARTITIONS
                        }
                    }
                }
            ]
        )
    return dump_documents(
        [
            {
                "apiVersion": "v1alpha1",
                "kind": "VolumeConfig",
                "name": partition,
                "encryption": {"provider": "luks2", "keys": _KEYS},
            }
            for partition in _PARTITIONS
        ]
    )


def inline_manifest(contract: VersionContract, name: str, manifest: str) -> str:
    """A Kubernetes manifest Talos applies to the cluster (on its control planes): ``cluster.inlineManifests``
    before 1.14, a ``KubeInlineManifestConfig`` document since."""
    if not contract.at_least(1, 14):
        return dump_documents([{"cluster": {"inlineManifests": [{"name": name, "contents": manifest}]}}])
    return dump_documents(
        [{"apiVersion": "v1alpha1", "kind": "KubeInlineManifestConfig", "name": name, "manifest": manifest}]
    )


def kube_span(contract: VersionContract) -> str:
    """KubeSpan on: ``machine.network.kubespan`` before 1.13, the ``KubeSpanConfig`` document since."""
    if not contract.at_least(1, 13):
        return dump_documents([{"machine": {"network": {"kubespan": {"enabled": True}}}}])
    return dump_documents([{"apiVersion": "v1alpha1", "kind": "KubeSpanConfig", "enabled": True}])


# Where the control plane components serve their metrics: on every address, for the platform to scrape
# (Talos binds them to localhost by default).
_BIND_ALL = {"bind-address": "0.0.0.0"}
_ETCD_METRICS = {"listen-metrics-urls": "http://0.0.0.0:2381"}
_NO_REGISTRATION = {"register-node": "false"}


def managed_control_plane(contract: VersionContract, *, register_nodes: bool) -> str:
    """A managed control plane's settings: its components' metrics endpoints bound for scraping and,
    unless ``register_nodes``, no kubelet node registration (the control planes then do not show in
    ``kubectl get nodes``). Kubernetes settings moved to their own documents at 1.14; etcd's stayed."""
    if not contract.at_least(1, 14):
        machine: dict[str, object] = {} if register_nodes else {"kubelet": {"extraArgs": _NO_REGISTRATION}}
        cluster = {
            "controllerManager": {"extraArgs": _BIND_ALL},
            "scheduler": {"extraArgs": _BIND_ALL},
            "etcd": {"extraArgs": _ETCD_METRICS},
        }
        return dump_documents([{"machine": machine, "cluster": cluster} if machine else {"cluster": cluster}])
    docs: list[dict[str, object]] = [
        {"cluster": {"etcd": {"extraArgs": _ETCD_METRICS}}},
        {"apiVersion": "v1alpha1", "kind": "KubeControllerManagerConfig", "extraArgs": _BIND_ALL},
        {"apiVersion": "v1alpha1", "kind": "KubeSchedulerConfig", "extraArgs": _BIND_ALL},
    ]
    if not register_nodes:
        docs.append({"apiVersion": "v1alpha1", "kind": "KubeletConfig", "extraArgs": _NO_REGISTRATION})
    return dump_documents(docs)


def siderolink(api_url: str, events_sink: str = "", kernel_log: str = "") -> str:
    """A joined machine's SideroLink settings as config documents, so that the installed system joins again
    at every boot (and after an upgrade) without the kernel arguments it first booted with: where to join
    (``SideroLinkConfig.apiUrl``, the join token in it), where its events and kernel log go."""
    documents: list[dict[str, object]] = [
        {"apiVersion": "v1alpha1", "kind": "SideroLinkConfig", "apiUrl": api_url}
    ]
    if events_sink:
        documents.append({"apiVersion": "v1alpha1", "kind": "EventSinkConfig", "endpoint": events_sink})
    if kernel_log:
        documents.append(
            {"apiVersion": "v1alpha1", "kind": "KmsgLogConfig", "name": "herder-kmsg", "url": kernel_log}
        )
    return dump_documents(documents)
