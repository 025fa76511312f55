"""Object metadata, owner references and status conditions, shaped as in Kubernetes."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

_CAMEL = ConfigDict(populate_by_name=True, extra="forbid", defer_build=True)

# Marks an object a controller owns (its name is the value): only that controller may change it.
CONTROLLER_ANNOTATION = "herder.dev/controller"


def list_map(*keys: str) -> dict[str, Any]:
    """The schema extension declaring a list whose items are merged by ``keys`` (as a map), not replaced
    whole, when configurations are applied: ``Field(json_schema_extra=list_map("type"))``."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


# The schema extension declaring a list of unique scalars merged as a set.
LIST_SET: dict[str, Any] = {"x-kubernetes-list-type": "set"}


def now_rfc3339() -> str:
    """The current time as Kubernetes writes timestamps: RFC 3339, UTC, whole seconds."""
    # time.strftime takes a seventh of the time datetime's does, and every create asks.
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def age_seconds(stamp: str) -> float | None:
    """How long ago an RFC 3339 timestamp was (None when it is not one)."""
    try:
        then = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    return (datetime.now(UTC) - then).total_seconds()


def now_micro() -> str:
    """The current time as Kubernetes' MicroTime: RFC 3339, UTC, microseconds (for ordering events that
    follow each other within a second); such stamps compare in time order as strings."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class OwnerReference(BaseModel):
    model_config = _CAMEL

    api_version: str = Field(alias="apiVersion")
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = Field(default=None, alias="blockOwnerDeletion")


class ManagedFieldsEntry(BaseModel):
    """Which fields one field manager owns, as server-side apply records them (``metadata.managedFields``).

    ``fieldsV1`` is the set of owned fields in Kubernetes' notation (``{"f:spec": {"f:replicas": {}}}``).
    """

    model_config = _CAMEL

    manager: str | None = None
    operation: Literal["Apply", "Update"] | None = None
    api_version: str | None = Field(default=None, alias="apiVersion")
    time: str | None = None
    fields_type: Literal["FieldsV1"] | None = Field(default=None, alias="fieldsType")
    fields_v1: dict[str, Any] | None = Field(default=None, alias="fieldsV1")
    subresource: str | None = None


def _empty(value: object) -> bool:
    return value == {} or value == []


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
    # Kubernetes omits empty labels, annotations, finalizers and owner references. (Per field: a
    # serializer wrapping the whole model cost twice the rest of its serialization.)
    labels: dict[str, str] = Field(default_factory=dict, exclude_if=_empty)
    annotations: dict[str, str] = Field(default_factory=dict, exclude_if=_empty)
    finalizers: list[str] = Field(default_factory=list, json_schema_extra=LIST_SET, exclude_if=_empty)
    owner_references: list[OwnerReference] = Field(
        default_factory=list, alias="ownerReferences", json_schema_extra=list_map("uid"), exclude_if=_empty
    )
    managed_fields: list[ManagedFieldsEntry] | None = Field(
        default=None, alias="managedFields", exclude_if=_empty
    )

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
