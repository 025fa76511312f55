"""OpenAPI documents generated from each kind's pydantic models: ``/openapi/v3`` (what kubectl 1.32
uses for ``explain`` and to learn that the server validates fields itself) and ``/openapi/v2``.

Kubernetes clients find a kind's schema by its ``x-kubernetes-group-version-kind`` extension, and
learn that the server checks unknown fields from the ``fieldValidation`` parameter of its PATCH
operation. pydantic writes JSON Schema 2020-12; it is rewritten into the OpenAPI 3.0 / Swagger 2.0
dialect that Kubernetes' Go clients parse (``nullable``, boolean ``exclusiveMinimum``, no ``const``).
v2 is served as JSON only: kubectl asks for protobuf first and, answered 406, carries on without it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, TypeAdapter

from herder.krm import discovery, media, patch
from herder.resources import KindInfo, KindRegistry, ObjectMeta

OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
STATUS = "io.k8s.apimachinery.pkg.apis.meta.v1.Status"

_STATUS_SCHEMA = {
    "type": "object",
    "description": "The answer to a failed request.",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "status": {"type": "string"},
        "message": {"type": "string"},
        "reason": {"type": "string"},
        "code": {"type": "integer", "format": "int32"},
        "details": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}


def accepts_json(accept: str | None) -> bool:
    if not accept:
        return True
    ranges = [part.split(";", 1)[0].strip().lower() for part in accept.split(",")]
    return any(r in ("application/json", "application/*", "*/*") for r in ranges)


def schema_name(info: KindInfo, suffix: str = "") -> str:
    """Kubernetes' definition name: the group reversed, then version and kind (``dev.herder.v1alpha1.X``)."""
    prefix = ".".join(reversed(info.group.split("."))) if info.group else "io.k8s.api.core"
    return f"{prefix}.{info.version}.{info.kind}{suffix}"


class _Schemas:
    """The named schemas of one document, each rewritten into the OpenAPI dialect as it is added."""

    def __init__(self, ref_base: str, v3: bool) -> None:
        self.ref_base = ref_base
        self.v3 = v3
        self.named: dict[str, Any] = {STATUS: _STATUS_SCHEMA}

    def ref(self, name: str) -> str:
        return self.ref_base + name

    def add_model(self, name: str, schema: dict[str, Any]) -> dict[str, Any]:
        """Hoist pydantic's ``$defs`` under ``name.`` and return ``schema`` converted."""
        for sub, body in schema.pop("$defs", {}).items():
            self.named[f"{name}.{sub}"] = self._convert(body)
        converted: dict[str, Any] = self._convert(schema)
        return converted

    def model(self, name: str, model: type[BaseModel]) -> dict[str, Any]:
        return self.add_model(
            name, model.model_json_schema(by_alias=True, ref_template=self.ref(name) + ".{model}")
        )

    def _convert(self, node: Any) -> Any:
        if isinstance(node, list):
            return [self._convert(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {k: self._convert(v) for k, v in node.items() if k not in ("title", "$schema")}
        variants = out.get("anyOf")
        if isinstance(variants, list) and {"type": "null"} in variants:
            rest = [v for v in variants if v != {"type": "null"}]
            del out["anyOf"]
            if len(rest) == 1:
                out = {**rest[0], **out}
            else:
                out["anyOf"] = rest
            if self.v3:
                out["nullable"] = True
            if out.get("default", 0) is None:
                del out["default"]
        if "const" in out:
            out["enum"] = [out.pop("const")]
        for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if isinstance(out.get(bound), int | float) and not isinstance(out[bound], bool):
                out[plain] = out[bound]
                out[bound] = True
        if "$ref" in out and len(out) > 1:
            # OpenAPI ignores a $ref's siblings (descriptions, defaults); Kubernetes wraps it in allOf.
            out["allOf"] = [{"$ref": out.pop("$ref")}]
        return out

    def kind(self, info: KindInfo) -> None:
        name = schema_name(info)
        properties: dict[str, Any] = {
            "apiVersion": {"type": "string", "description": f"{info.api_version}"},
            "kind": {"type": "string", "description": f"{info.kind}"},
            "metadata": {
                "description": "Standard object's metadata.",
                "allOf": [{"$ref": self.ref(OBJECT_META)}],
                "default": {},
            },
        }
        for field, model in (("spec", info.spec_model), ("status", info.status_model)):
            if model is not None:
                properties[field] = self.model(f"{name}.{field}", model)
        for field, type_ in info.extra_fields.items():
            properties[field] = self.add_model(
                f"{name}.{field}", TypeAdapter(type_).json_schema(by_alias=True)
            )
        self.named[name] = {
            "type": "object",
            "description": info.description or info.kind,
            "properties": properties,
            "x-kubernetes-group-version-kind": [
                {"group": info.group, "version": info.version, "kind": info.kind}
            ],
        }
        self.named[schema_name(info, "List")] = {
            "type": "object",
            "description": f"A list of {info.kind} objects.",
            "required": ["items"],
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "items": {"type": "array", "items": {"$ref": self.ref(name)}},
            },
            "x-kubernetes-group-version-kind": [
                {"group": info.group, "version": info.version, "kind": f"{info.kind}List"}
            ],
        }


def _parameter(name: str, description: str, where: str = "query") -> dict[str, Any]:
    return {"name": name, "in": where, "description": description, "schema": {"type": "string"}}


_NAMESPACE = _parameter("namespace", "the namespace of the objects", "path")
_NAME = _parameter("name", "the name of the object", "path")
_WRITE = [
    _parameter("dryRun", "All: process the request without persisting it"),
    _parameter("fieldValidation", "Strict (the default), Warn or Ignore: what to do with unknown fields"),
    _parameter("fieldManager", "the name of the actor making the change"),
]
_FORCE = _parameter("force", "server-side apply: take the fields other managers own (true or false)")
_READ = [
    _parameter("labelSelector", "a selector on the objects' labels"),
    _parameter("fieldSelector", "a selector on metadata.name and metadata.namespace"),
    _parameter("limit", "the most objects to return"),
    _parameter("continue", "the continue token of the previous page"),
    _parameter("resourceVersion", "list or watch from this revision"),
    _parameter("watch", "stream changes as watch events"),
    _parameter("timeoutSeconds", "how long a watch lasts"),
    _parameter("allowWatchBookmarks", "send BOOKMARK events"),
    _parameter("sendInitialEvents", "start a watch with the current objects"),
]


def _operations(info: KindInfo, schemas: _Schemas, prefix: str) -> dict[str, Any]:
    """The paths of one kind, each operation tagged with the kind's group, version and kind."""
    gvk = {"group": info.group, "version": info.version, "kind": info.kind}
    obj_ref = {"$ref": schemas.ref(schema_name(info))}
    list_ref = {"$ref": schemas.ref(schema_name(info, "List"))}
    scope = f"{prefix}/namespaces/{{namespace}}" if info.namespaced else prefix
    path_params = [_NAMESPACE] if info.namespaced else []

    def op(
        verb: str, action: str, answer: dict[str, Any], params: list[dict[str, Any]], body: list[str]
    ) -> Any:
        out: dict[str, Any] = {
            "operationId": f"{verb}{info.kind}",
            "parameters": params,
            "responses": {
                "200": _content(schemas, answer),
                "default": _content(schemas, {"$ref": schemas.ref(STATUS)}),
            },
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk,
        }
        if body:
            if schemas.v3:
                body_schema = obj_ref if action in ("post", "put") else {"type": "object"}
                out["requestBody"] = {"content": {t: {"schema": body_schema} for t in body}, "required": True}
            else:
                out["consumes"] = body
                out["parameters"] = [
                    *params,
                    {"name": "body", "in": "body", "required": True, "schema": obj_ref},
                ]
        return out

    named = [*path_params, _NAME]
    paths = {
        f"{scope}/{info.plural}": {
            "get": op("list", "list", list_ref, [*path_params, *_READ], []),
            "post": op("create", "post", obj_ref, [*path_params, *_WRITE], [media.JSON]),
            "delete": op(
                "deletecollection", "deletecollection", list_ref, [*path_params, *_READ[:2], _WRITE[0]], []
            ),
        },
        f"{scope}/{info.plural}/{{name}}": {
            "get": op("read", "get", obj_ref, named, []),
            "put": op("replace", "put", obj_ref, [*named, *_WRITE], [media.JSON]),
            "patch": op("patch", "patch", obj_ref, [*named, *_WRITE, _FORCE], patch.accepted(info)),
            "delete": op("delete", "delete", obj_ref, [*named, _WRITE[0]], []),
        },
    }
    if info.has_status:
        paths[f"{scope}/{info.plural}/{{name}}/status"] = {
            "get": op("read", "get", obj_ref, named, []),
            "put": op("replace", "put", obj_ref, [*named, *_WRITE], [media.JSON]),
            "patch": op("patch", "patch", obj_ref, [*named, *_WRITE, _FORCE], patch.accepted(info)),
        }
    if info.namespaced:
        paths[f"{prefix}/{info.plural}"] = {"get": op("listAllNamespaces", "list", list_ref, _READ, [])}
    return paths


def _content(schemas: _Schemas, schema: dict[str, Any]) -> dict[str, Any]:
    if schemas.v3:
        return {"description": "OK", "content": {"application/json": {"schema": schema}}}
    return {"description": "OK", "schema": schema}


def _prefix(group: str, version: str) -> str:
    return f"/apis/{group}/{version}" if group else f"/api/{version}"


def _document(kinds: list[KindInfo], v3: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    schemas = _Schemas("#/components/schemas/" if v3 else "#/definitions/", v3)
    schemas.named[OBJECT_META] = schemas.model(OBJECT_META, ObjectMeta)
    paths: dict[str, Any] = {}
    for info in kinds:
        schemas.kind(info)
        paths.update(_operations(info, schemas, _prefix(info.group, info.version)))
    return paths, schemas.named


def v2(registry: KindRegistry) -> dict[str, Any]:
    """The Swagger 2.0 document of every kind."""
    paths, definitions = _document(list(registry), v3=False)
    info = {"title": "herder", "version": discovery.version_info()["gitVersion"]}
    return {"swagger": "2.0", "info": info, "paths": paths, "definitions": definitions}


def v3(registry: KindRegistry, path: str) -> dict[str, Any] | None:
    """The OpenAPI 3.0 document of one group version (``apis/herder.dev/v1alpha1`` or ``api/v1``)."""
    kinds = [k for k in registry if _prefix(k.group, k.version) == "/" + path.strip("/")]
    if not kinds:
        return None
    paths, schemas = _document(kinds, v3=True)
    title = discovery.group_version(kinds[0].group, kinds[0].version)
    return {
        "openapi": "3.0.0",
        "info": {"title": title, "version": kinds[0].version},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def v3_index(registry: KindRegistry, root_path: str = "") -> dict[str, Any]:
    """``/openapi/v3``: where each group version's document is, with a hash that changes with it."""
    out = {}
    for group, versions in registry.groups().items():
        for version in versions:
            path = _prefix(group, version).lstrip("/")
            digest = hashlib.sha512(json.dumps(v3(registry, path), sort_keys=True).encode()).hexdigest()[:64]
            out[path] = {"serverRelativeURL": f"{root_path}/openapi/v3/{path}?hash={digest.upper()}"}
    return {"paths": out}


class Documents:
    """A registry's OpenAPI documents, encoded once and rebuilt only when its kinds change.

    Building them takes milliseconds of CPU, and kubectl fetches them on every ``apply`` and ``explain``.
    """

    def __init__(self, registry: KindRegistry) -> None:
        self.registry = registry
        self._kinds: tuple[int, ...] = ()
        self._encoded: dict[tuple[str, str], bytes | None] = {}

    def _cached(self, key: tuple[str, str], build: Callable[[], dict[str, Any] | None]) -> bytes | None:
        kinds = tuple(id(k) for k in self.registry)
        if kinds != self._kinds:
            self._kinds, self._encoded = kinds, {}
        if key not in self._encoded:
            document = build()
            self._encoded[key] = None if document is None else media.dumps(document)
        return self._encoded[key]

    def v2(self) -> bytes | None:
        return self._cached(("v2", ""), lambda: v2(self.registry))

    def v3(self, path: str) -> bytes | None:
        return self._cached(("v3", path), lambda: v3(self.registry, path))

    def v3_index(self, root_path: str) -> bytes | None:
        return self._cached(("index", root_path), lambda: v3_index(self.registry, root_path))
