"""The registry of every kind herder's API serves."""

from __future__ import annotations

from herder.resources.access import ACCESS_KINDS
from herder.resources.access_policy import ACCESS_POLICY
from herder.resources.backups import BACKUP_KINDS
from herder.resources.cluster_secrets import CLUSTER_SECRETS
from herder.resources.clusters import CLUSTER_KINDS
from herder.resources.config_history import MACHINE_CONFIG_HISTORY
from herder.resources.configuration import CONFIG_PATCH
from herder.resources.control_planes import CONTROL_PLANE_STATUS
from herder.resources.core import NAMESPACE
from herder.resources.join import JOIN_KINDS
from herder.resources.kubernetes import EVENT
from herder.resources.machines import MACHINE_KINDS
from herder.resources.managed import MANAGED_CONTROL_PLANE_OFFERING
from herder.resources.manifests import MANIFEST_KINDS
from herder.resources.provisioning import PROVISIONING_KINDS
from herder.resources.registry import KindRegistry


def herder_registry() -> KindRegistry:
    """A fresh registry holding herder's kinds."""
    return KindRegistry(
        [
            NAMESPACE,
            EVENT,
            CONFIG_PATCH,
            CLUSTER_SECRETS,
            *MACHINE_KINDS,
            *CLUSTER_KINDS,
            MACHINE_CONFIG_HISTORY,
            CONTROL_PLANE_STATUS,
            *MANIFEST_KINDS,
            *BACKUP_KINDS,
            *PROVISIONING_KINDS,
            *JOIN_KINDS,
            MANAGED_CONTROL_PLANE_OFFERING,
            *ACCESS_KINDS,
            ACCESS_POLICY,
        ]
    )
