"""ClusterSecrets: a cluster's Talos secrets bundle. Sensitive: encrypted at rest."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from herder.resources.configuration import GROUP, VERSION
from herder.resources.registry import KindInfo


class ClusterSecretsSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

    bundle: str = Field(min_length=1, description="the secrets bundle in talosctl's secrets YAML format")
    talos_contract: str = Field(default="", alias="talosContract", description="version contract, X.Y")
    restored_from: str = Field(
        default="",
        alias="restoredFrom",
        description="CLUSTER_UUID/SNAPSHOT: the backup whose Kubernetes encryption secrets the bundle carries",
    )


CLUSTER_SECRETS = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="ClusterSecrets",
    plural="clustersecrets",
    spec_model=ClusterSecretsSpec,
    categories=("herder",),
    sensitive=True,
    description="The Talos secrets bundle of one cluster (CAs, tokens); encrypted at rest.",
)
