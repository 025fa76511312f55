"""Object metadata, owner references and status conditions, shaped as in Kubernetes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

_CAMEL = ConfigDict(populate_by_name=True, extra="forbid")


def now_rfc3339() -> str:
    """The current time as Kubernetes writes timestamps: RFC 3339, UTC, whole seconds."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class OwnerReference(BaseModel):
    model_config = _CAMEL

    api_version: str = Field(alias="apiVersion")
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = Field(default=None, alias="blockOwnerDeletion")


class ObjectMeta(BaseModel):
    model_config = _CAMEL

    name: str | None = None
    generate_name: str | None = Field(default=None, alias="generateName")
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = Field(default=None, alias="resourceVersion")
    generation: int | None = None
    creation_timestamp: str | None = Field(default=None, alias="creationTimestamp")
    deletion_timestamp: str | None = Field(default=None, alias="deletionTimestamp")
    deletion_grace_period_seconds: int | None = Field(default=None, alias="deletionGracePeriodSeconds")
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: list[str] = Field(default_factory=list)
    owner_references: list[OwnerReference] = Field(default_factory=list, alias="ownerReferences")
    # Kubernetes clients send managedFields (server-side apply bookkeeping); herder keeps none.
    managed_fields: list[dict[str, Any]] | None = Field(default=None, alias="managedFields", exclude=True)

    @model_serializer(mode="wrap")
    def _omit_empty(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Kubernetes omits empty labels, annotations, finalizers and owner references.
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if v != {} and v != []}

    def controller_ref(self) -> OwnerReference | None:
        """The owner reference marked ``controller: true``, if any."""
        return next((r for r in self.owner_references if r.controller), None)


class Condition(BaseModel):
    """A status condition as in Kubernetes (``status.conditions[]``)."""

    model_config = _CAMEL

    type: str
    status: str = Field(pattern="^(True|False|Unknown)$")
    reason: str = ""
    message: str = ""
    last_transition_time: str = Field(default_factory=now_rfc3339, alias="lastTransitionTime")
    observed_generation: int | None = Field(default=None, alias="observedGeneration")
