"""The shape every object has: apiVersion, kind, metadata, and its kind's body (spec, status, data…)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from herder.resources.meta import ObjectMeta

# Top-level fields that are not part of an object's body.
ENVELOPE_FIELDS = frozenset({"apiVersion", "kind", "metadata"})


class Resource(BaseModel):
    """One object of the resource model.

    ``spec`` and ``status`` are kept as plain JSON data here: the kind registry validates them against
    the kind's typed models and ``KindInfo.spec_of`` gives typed access. Kinds with other top-level
    fields (a ConfigMap's ``data``) keep them as extra fields.
    """

    model_config = ConfigDict(populate_by_name=True, extra="allow", defer_build=True)

    api_version: str = Field(alias="apiVersion")
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: dict[str, Any] | None = None
    status: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def namespace(self) -> str | None:
        return self.metadata.namespace

    @property
    def resource_version(self) -> int:
        return int(self.metadata.resource_version or 0)

    def body(self) -> dict[str, Any]:
        """Every top-level field except apiVersion, kind, metadata and status: what ``generation`` tracks."""
        out: dict[str, Any] = {}
        if self.spec is not None:
            out["spec"] = self.spec
        if self.model_extra:
            out.update(self.model_extra)
        return out

    # pydantic-core's validator and serializer are called directly: on these paths (every write, decode
    # and list) the BaseModel methods around them cost as much again, and model_dump_json turns the
    # serialized bytes into a str that the callers would only encode back.

    def to_dict(self, *, exclude: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The object as JSON data, in the wire form Kubernetes clients expect (without the fields
        ``exclude`` names, as ``model_dump`` takes them)."""
        return self.__pydantic_serializer__.to_python(  # type: ignore[no-any-return]
            self, mode="json", by_alias=True, exclude_none=True, exclude=exclude
        )

    def to_json(self, *, exclude: Mapping[str, Any] | None = None) -> bytes:
        """``to_dict`` as JSON."""
        return self.__pydantic_serializer__.to_json(self, by_alias=True, exclude_none=True, exclude=exclude)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Resource:
        return cls.__pydantic_validator__.validate_python(data)  # type: ignore[no-any-return]

    @classmethod
    def from_json(cls, data: bytes | str) -> Resource:
        return cls.__pydantic_validator__.validate_json(data)  # type: ignore[no-any-return]

    def clone(self) -> Resource:
        """An independent copy; a round trip through pydantic-core is far cheaper than deepcopy."""
        return Resource.from_dict(
            self.__pydantic_serializer__.to_python(self, by_alias=True, exclude_none=True)
        )
