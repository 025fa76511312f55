"""PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902), and strategic merge patch.

Kubernetes answers strategic merge patches only for its built-in (core group) kinds and refuses them
for custom resources with 415. herder does the same: for core kinds a strategic merge patch is applied
as a merge patch that understands the ``$patch`` directive and drops the other ``$`` directives, which
covers what kubectl sends for labels, annotations and ``apply`` of maps (lists are replaced whole).
Server-side apply (``application/apply-patch+yaml``) is served for every kind, by ``fieldmanager``.
"""

from __future__ import annotations

from typing import Any

import jsonpatch

from herder.krm.media import parse
from herder.krm.status import ApiError
from herder.resources import KindInfo

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"


def accepted(info: KindInfo) -> list[str]:
    """The patch media types served for ``info``."""
    return [JSON_PATCH, MERGE, APPLY, STRATEGIC] if not info.group else [JSON_PATCH, MERGE, APPLY]


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386: maps merge key by key, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def strategic(target: Any, patch: Any) -> Any:
    """A merge patch with strategic merge patch directives: ``$patch: replace|delete``, others dropped."""
    if not isinstance(patch, dict):
        return patch
    directive = patch.get("$patch")
    body = {k: v for k, v in patch.items() if not k.startswith("$")}
    if directive == "replace":
        return body
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in body.items():
        if value is None or (isinstance(value, dict) and value.get("$patch") == "delete"):
            out.pop(key, None)
        else:
            out[key] = strategic(out.get(key), value)
    return out


class Patch:
    """A parsed PATCH body of one of the ``accepted`` types but ``APPLY`` (which ``fieldmanager`` carries
    out), ready to apply to the current object."""

    def __init__(self, info: KindInfo, content_type: str, body: bytes) -> None:
        """Raises 415 for a type not served for ``info`` and 400 for a malformed patch."""
        if content_type not in accepted(info):
            raise ApiError(
                415,
                "the body of the request was in an unknown format - accepted media types include: "
                + ", ".join(accepted(info)),
            )
        self.content_type = content_type
        data = parse(body, "application/json")
        if content_type == JSON_PATCH:
            if not isinstance(data, list):
                raise ApiError(400, "a JSON patch must be a JSON array of operations")
            try:
                self.ops = jsonpatch.JsonPatch(data)
            except (jsonpatch.JsonPatchException, TypeError, AttributeError) as err:
                raise ApiError(400, f"invalid JSON patch: {err}") from None
        elif not isinstance(data, dict):
            raise ApiError(400, "a merge patch must be a JSON object")
        self.data = data

    def apply(self, current: dict[str, Any]) -> Any:
        """``current`` with the patch applied; a JSON patch that does not apply is a 422."""
        if self.content_type == MERGE:
            return merge(current, self.data)
        if self.content_type == STRATEGIC:
            return strategic(current, self.data)
        try:
            return self.ops.apply(current)
        except (
            jsonpatch.JsonPatchException,
            jsonpatch.JsonPointerException,
            LookupError,
            TypeError,
            ValueError,
        ) as err:
            raise ApiError(422, f"the JSON patch does not apply: {err}") from None
