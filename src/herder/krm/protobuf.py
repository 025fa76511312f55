"""Request bodies in Kubernetes' protobuf encoding (``application/vnd.kubernetes.protobuf``), read into the
JSON form every other part of ``krm`` works with.

kubectl's typed commands (``kubectl create namespace``, ``create configmap``, ``create secret``, ``create
role``/``rolebinding``…, ``auth can-i``, ``auth whoami``) send the built-in kinds they create this way. A
body is the magic ``k8s\\0`` and a ``runtime.Unknown`` envelope (type meta, raw object); the object is decoded
by the field numbers of its kind's message in the Kubernetes API (core ``v1`` Namespace, ConfigMap, Secret;
``rbac.authorization.k8s.io/v1`` Role, ClusterRole and their bindings; the self reviews of
``authorization.k8s.io/v1`` and ``authentication.k8s.io/v1``; and their ``ObjectMeta``). Other kinds are
refused with 415, which tells a client to send JSON. Answers are always JSON.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from herder.krm.status import ApiError

PROTOBUF = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

# A schema maps a field number to (JSON name, type); a type is a scalar name, a nested schema, or
# ("repeated", type) / ("map", value type).
Schema = dict[int, tuple[str, Any]]

_TIME: Schema = {1: ("seconds", "int"), 2: ("nanos", "int")}
_OWNER_REFERENCE: Schema = {
    1: ("kind", "string"),
    3: ("name", "string"),
    4: ("uid", "string"),
    5: ("apiVersion", "string"),
    6: ("controller", "bool"),
    7: ("blockOwnerDeletion", "bool"),
}
_OBJECT_META: Schema = {
    1: ("name", "string"),
    2: ("generateName", "string"),
    3: ("namespace", "string"),
    5: ("uid", "string"),
    6: ("resourceVersion", "string"),
    7: ("generation", "int"),
    8: ("creationTimestamp", "time"),
    9: ("deletionTimestamp", "time"),
    10: ("deletionGracePeriodSeconds", "int"),
    11: ("labels", ("map", "string")),
    12: ("annotations", ("map", "string")),
    13: ("ownerReferences", ("repeated", _OWNER_REFERENCE)),
    14: ("finalizers", ("repeated", "string")),
}
_LABEL_SELECTOR: Schema = {
    1: ("matchLabels", ("map", "string")),
    2: (
        "matchExpressions",
        (
            "repeated",
            {1: ("key", "string"), 2: ("operator", "string"), 3: ("values", ("repeated", "string"))},
        ),
    ),
}
_POLICY_RULE: Schema = {
    1: ("verbs", ("repeated", "string")),
    2: ("apiGroups", ("repeated", "string")),
    3: ("resources", ("repeated", "string")),
    4: ("resourceNames", ("repeated", "string")),
    5: ("nonResourceURLs", ("repeated", "string")),
}
_BINDING: Schema = {
    1: ("metadata", _OBJECT_META),
    2: (
        "subjects",
        (
            "repeated",
            {
                1: ("kind", "string"),
                2: ("apiGroup", "string"),
                3: ("name", "string"),
                4: ("namespace", "string"),
            },
        ),
    ),
    3: ("roleRef", {1: ("apiGroup", "string"), 2: ("kind", "string"), 3: ("name", "string")}),
}
_RESOURCE_ATTRIBUTES: Schema = {
    1: ("namespace", "string"),
    2: ("verb", "string"),
    3: ("group", "string"),
    4: ("version", "string"),
    5: ("resource", "string"),
    6: ("subresource", "string"),
    7: ("name", "string"),
}
_RBAC = "rbac.authorization.k8s.io/v1"
KINDS: dict[tuple[str, str], Schema] = {
    ("v1", "Namespace"): {
        1: ("metadata", _OBJECT_META),
        2: ("spec", {1: ("finalizers", ("repeated", "string"))}),
        3: ("status", {1: ("phase", "string")}),
    },
    ("v1", "ConfigMap"): {
        1: ("metadata", _OBJECT_META),
        2: ("data", ("map", "string")),
        3: ("binaryData", ("map", "bytes")),
        4: ("immutable", "bool"),
    },
    ("v1", "Secret"): {
        1: ("metadata", _OBJECT_META),
        2: ("data", ("map", "bytes")),
        3: ("type", "string"),
        4: ("stringData", ("map", "string")),
        5: ("immutable", "bool"),
    },
    (_RBAC, "Role"): {1: ("metadata", _OBJECT_META), 2: ("rules", ("repeated", _POLICY_RULE))},
    (_RBAC, "ClusterRole"): {
        1: ("metadata", _OBJECT_META),
        2: ("rules", ("repeated", _POLICY_RULE)),
        3: ("aggregationRule", {1: ("clusterRoleSelectors", ("repeated", _LABEL_SELECTOR))}),
    },
    (_RBAC, "RoleBinding"): _BINDING,
    (_RBAC, "ClusterRoleBinding"): _BINDING,
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): {
        1: ("metadata", _OBJECT_META),
        2: (
            "spec",
            {
                1: ("resourceAttributes", _RESOURCE_ATTRIBUTES),
                2: ("nonResourceAttributes", {1: ("path", "string"), 2: ("verb", "string")}),
            },
        ),
    },
    ("authorization.k8s.io/v1", "SelfSubjectRulesReview"): {
        1: ("metadata", _OBJECT_META),
        2: ("spec", {1: ("namespace", "string")}),
    },
    ("authentication.k8s.io/v1", "SelfSubjectReview"): {1: ("metadata", _OBJECT_META)},
}
_UNKNOWN: Schema = {
    1: ("typeMeta", {1: ("apiVersion", "string"), 2: ("kind", "string")}),
    2: ("raw", "raw"),
    3: ("contentEncoding", "string"),
    4: ("contentType", "string"),
}


class _Malformed(ValueError):
    pass


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise _Malformed("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each field: an int for varints, bytes for length-delimited fields."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield number, value
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise _Malformed("truncated field")
            yield number, data[pos : pos + length]
            pos += length
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise _Malformed(f"unsupported wire type {wire}")


def _scalar(kind: str, value: int | bytes) -> Any:
    if kind == "int":
        if not isinstance(value, int):
            raise _Malformed("expected a varint")
        return value - (1 << 64) if value >= 1 << 63 else value
    if kind == "bool":
        return bool(value)
    if not isinstance(value, bytes):
        raise _Malformed("expected a length-delimited field")
    if kind == "string":
        return value.decode("utf-8")
    if kind == "bytes":
        return base64.b64encode(value).decode("ascii")
    if kind == "time":
        seconds = _message(value, _TIME).get("seconds", 0)
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return value  # "raw"


def _value(kind: Any, value: int | bytes) -> Any:
    if isinstance(kind, dict):
        if not isinstance(value, bytes):
            raise _Malformed("expected a message")
        return _message(value, kind)
    return _scalar(kind, value)


def _message(data: bytes, schema: Schema) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, value in _fields(data):
        if number not in schema:
            continue
        name, kind = schema[number]
        if isinstance(kind, tuple) and kind[0] == "repeated":
            out.setdefault(name, []).append(_value(kind[1], value))
        elif isinstance(kind, tuple) and kind[0] == "map":
            if not isinstance(value, bytes):
                raise _Malformed("expected a map entry")
            entry = _message(value, {1: ("key", "string"), 2: ("value", kind[1])})
            out.setdefault(name, {})[entry.get("key", "")] = entry.get("value", "")
        else:
            out[name] = _value(kind, value)
    return out


def decode(body: bytes) -> dict[str, Any]:
    """The object a protobuf request body holds, as JSON data."""
    if not body.startswith(MAGIC):
        raise ApiError(400, "the protobuf body does not start with the Kubernetes magic number")
    try:
        envelope = _message(body[len(MAGIC) :], _UNKNOWN)
        type_meta = envelope.get("typeMeta", {})
        key = (type_meta.get("apiVersion", ""), type_meta.get("kind", ""))
        schema = KINDS.get(key)
        if schema is None:
            raise ApiError(
                415,
                f"protobuf is read for {', '.join(k for _v, k in KINDS)} only: send {key[1]} as application/json",
            )
        obj = _message(envelope.get("raw", b""), schema)
    except (_Malformed, UnicodeDecodeError) as e:
        raise ApiError(400, f"malformed protobuf body: {e}") from None
    return {"apiVersion": key[0], "kind": key[1], **obj}
