"""The registry of every kind herder's API serves."""

from __future__ import annotations

from herder.resources.access import ACCESS_KINDS
from herder.resources.cluster_secrets import CLUSTER_SECRETS
from herder.resources.configuration import CONFIG_PATCH
from herder.resources.core import NAMESPACE
from herder.resources.registry import KindRegistry


def herder_registry() -> KindRegistry:
    """A fresh registry holding herder's kinds."""
    return KindRegistry([NAMESPACE, CONFIG_PATCH, CLUSTER_SECRETS, *ACCESS_KINDS])
