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
