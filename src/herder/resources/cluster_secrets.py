"""ClusterSecrets: a cluster's Talos secrets bundle. Sensitive: encrypted at rest.

Beside the bundle (whose CAs are the issuing ones), the CAs a CA rotation has machines accept as well
(``acceptedCAs``), and the rotation's own keys (``rotation``: the new CA, and the old one once replaced), so
that every step of a rotation is a state of this object that a restart finds as it was left.
"""

from __future__ import annotations

import base64
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from herder.resources.configuration import GROUP, VERSION
from herder.resources.registry import KindInfo

_STRICT = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

CAComponent = Literal["TalosCA", "KubernetesCA"]
"""The CAs herder rotates: the Talos API's (``machine.ca``) and Kubernetes' (``cluster.ca``)."""


class AcceptedCAs(BaseModel):
    """CA certificates (base64 PEM) machines accept besides the issuing ones."""

    model_config = _STRICT

    talos: list[str] = Field(default_factory=list, description="machine.acceptedCAs")
    kubernetes: list[str] = Field(default_factory=list, description="cluster.acceptedCAs")

    def of(self, component: CAComponent) -> list[str]:
        return self.talos if component == "TalosCA" else self.kubernetes


class CARotationKeys(BaseModel):
    """The CAs of a rotation under way (base64 PEM): the new one from the start, the old one once replaced."""

    model_config = _STRICT

    component: CAComponent
    generation: int = Field(ge=0)
    new_crt: str = Field(alias="newCrt")
    new_key: str = Field(alias="newKey")
    old_crt: str = Field(default="", alias="oldCrt")


class ClusterSecretsSpec(BaseModel):
    model_config = _STRICT

    bundle: str = Field(min_length=1, description="the secrets bundle in talosctl's secrets YAML format")
    talos_contract: str = Field(default="", alias="talosContract", description="version contract, X.Y")
    restored_from: str = Field(
        default="",
        alias="restoredFrom",
        description="CLUSTER_UUID/SNAPSHOT: the backup whose Kubernetes encryption secrets the bundle carries",
    )
    accepted_cas: AcceptedCAs = Field(default_factory=AcceptedCAs, alias="acceptedCAs")
    rotation: CARotationKeys | None = None

    def trusted(self, component: CAComponent) -> list[bytes]:
        """The PEM CA certificates herder trusts beside the issuing one: the accepted ones, and during a
        rotation of ``component`` both of its CAs (a machine may serve from either until it is done)."""
        encoded = list(self.accepted_cas.of(component))
        rotation = self.rotation
        if rotation is not None and rotation.component == component:
            encoded += [c for c in (rotation.new_crt, rotation.old_crt) if c]
        return [base64.b64decode(c) for c in dict.fromkeys(encoded)]


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
