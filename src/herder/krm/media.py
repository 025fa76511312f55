"""Content negotiation and request bodies: which representation a client accepts, and reading a body
of JSON or YAML within a size limit.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import yaml
from starlette.requests import Request

from herder.krm.status import ApiError
from herder.resources import Resource

JSON = "application/json"
YAML = "application/yaml"

Representation = Literal["json", "table"]
# The deepest nesting of lists and objects accepted in a request body; objects need a few dozen.
MAX_DEPTH = 100


def dumps(data: Any) -> bytes:
    """Compact JSON, as the API answers."""
    return json.dumps(data, separators=(",", ":")).encode()


def dump_resource(obj: Resource) -> bytes:
    """An object's wire form as JSON, straight from its model (the same as ``dumps(obj.to_dict())``)."""
    return Resource.__pydantic_serializer__.to_json(obj, by_alias=True, exclude_none=True)


def media_type(header: str | None) -> str:
    """The bare media type of a Content-Type header, lower case, without parameters."""
    return (header or "").split(";", 1)[0].strip().lower()


def _parse_range(text: str) -> tuple[str, dict[str, str]]:
    kind, *params = (p.strip() for p in text.split(";"))
    pairs = (p.partition("=") for p in params)
    return kind.lower(), {k.strip().lower(): v.strip().strip('"') for k, _, v in pairs}


def negotiate(accept: str | None) -> Representation:
    """JSON or a meta.k8s.io Table, in the client's order of preference; 406 when neither is accepted."""
    if not accept or accept == JSON:  # what programs send: no parsing needed
        return "json"
    for text in accept.split(","):
        kind, params = _parse_range(text)
        if kind not in (JSON, "application/*", "*/*"):
            continue
        if params.get("q") in ("0", "0.0"):
            continue
        shape = params.get("as")
        if shape is None:
            return "json"
        if shape == "Table" and params.get("g") == "meta.k8s.io" and params.get("v") in ("v1", "v1beta1"):
            return "table"
    raise ApiError(406, f"only application/json and meta.k8s.io/v1 Table are served, not {accept!r}")


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it is known to exceed ``limit`` bytes."""
    too_large = ApiError(413, f"request entity too large: limit is {limit} bytes")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


class _NoAliasLoader(yaml.SafeLoader):
    """Safe YAML without anchors and aliases, which can expand a small body into a huge object."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            raise yaml.YAMLError("YAML aliases are not accepted")
        return super().compose_node(parent, index)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _depth(data: Any) -> int:
    """How deeply ``data`` nests lists and objects, found without recursion."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in children)
    return deepest


def parse(body: bytes, content_type: str) -> Any:
    """Decode a JSON or YAML body into JSON data; a malformed or absurdly nested one is a 400.

    The depth limit keeps every later step (patching, validation, encoding) clear of Python's
    recursion limit.
    """
    try:
        if content_type in (YAML, "application/x-yaml", "text/yaml"):
            # A round trip through JSON turns YAML's timestamps and other non-JSON scalars into strings.
            data = json.loads(json.dumps(yaml.load(body, Loader=_NoAliasLoader), default=str))
        else:
            data = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, yaml.YAMLError, RecursionError) as err:
        raise ApiError(
            400, f"the request body is not valid {'YAML' if 'yaml' in content_type else 'JSON'}: {err}"
        ) from None
    if _depth(data) > MAX_DEPTH:
        raise ApiError(400, f"the request body nests more than {MAX_DEPTH} levels deep")
    return data


def parse_object(body: bytes, content_type: str) -> dict[str, Any]:
    """Decode a body that must hold one object (a JSON object or YAML mapping)."""
    data = parse(body, content_type)
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be an object")
    return data
