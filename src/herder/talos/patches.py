"""Talos config patches: load them from text and apply them to a machine config as Talos does.

A patch text is, as for Talos's ``configpatcher.LoadPatch``, either a strategic merge patch (a partial
multi-document config, the legacy v1alpha1 document may omit ``version:``) or a JSON 6902 patch (a JSON
or YAML list of operations). Strategic patches may carry ``$patch: delete`` on a whole document, a map
key or a list element (selected by its first other field); those are taken out of the patch when it is
loaded and applied, in document order, before the rest of their document is merged. JSON 6902 patches
only apply to single-document configs, as in Talos.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import jsonpatch
import jsonpointer
import yaml

from herder.talos.documents import (
    LEGACY_KEYS,
    LEGACY_KIND,
    DocumentID,
    describe_yaml_error,
    document_id,
    dump_documents,
    load_documents,
)
from herder.talos.strategic_merge import MergeError, merge_document


class PatchError(ValueError):
    """A patch that cannot be loaded or applied; the message names the problem."""


@dataclass(frozen=True)
class DeleteSelector:
    """A ``$patch: delete`` taken out of a strategic patch.

    An empty ``path`` deletes the whole document. A path ending in ``[i]`` deletes the first element of
    that list whose field ``key`` equals ``value``; any other path deletes that map key.
    """

    document: DocumentID
    path: tuple[str, ...] = ()
    key: str = ""
    value: str = ""

    @property
    def dotted_path(self) -> str:
        return ".".join(self.path)


@dataclass(frozen=True)
class StrategicMergePatch:
    """Documents to merge and deletes to apply, in the order the patch text gives them."""

    steps: tuple[DeleteSelector | dict[str, Any], ...]

    @property
    def documents(self) -> list[dict[str, Any]]:
        return [step for step in self.steps if isinstance(step, dict)]

    @property
    def deletes(self) -> list[DeleteSelector]:
        return [step for step in self.steps if isinstance(step, DeleteSelector)]


@dataclass(frozen=True)
class JSON6902Patch:
    """RFC 6902 operations, applied to the single document of a config."""

    operations: tuple[dict[str, Any], ...]


Patch: TypeAlias = StrategicMergePatch | JSON6902Patch

_JSON_OPS: dict[str, tuple[str, ...]] = {
    "add": ("value",),
    "remove": (),
    "replace": ("value",),
    "move": ("from",),
    "copy": ("from",),
    "test": ("value",),
}


def load_patch(text: str) -> Patch:
    """One patch from its text (not a file name); raises ``PatchError``."""
    try:
        documents = load_documents(text)
    except yaml.YAMLError as exc:
        raise PatchError(f"malformed patch: {describe_yaml_error(exc)}") from exc
    if len(documents) == 1 and isinstance(documents[0], list):
        return JSON6902Patch(tuple(_check_operation(i, op) for i, op in enumerate(documents[0])))
    steps: list[DeleteSelector | dict[str, Any]] = []
    for index, document in enumerate(documents):
        if not isinstance(document, dict):
            raise PatchError(
                f"malformed patch: document {index + 1} is a {type(document).__name__}, expected a config "
                "document (a map) or a list of JSON patch operations"
            )
        steps.extend(_split_deletes(copy.deepcopy(document), index))
    return StrategicMergePatch(tuple(steps))


def load_patches(texts: Sequence[str]) -> list[Patch]:
    """Patches from their texts; consecutive JSON 6902 patches are joined into one, as Talos does."""
    patches: list[Patch] = []
    for text in texts:
        patch = load_patch(text)
        if isinstance(patch, JSON6902Patch) and patches and isinstance(patches[-1], JSON6902Patch):
            patches[-1] = JSON6902Patch(patches[-1].operations + patch.operations)
        else:
            patches.append(patch)
    return patches


def load_config(config_yaml: str) -> list[dict[str, Any]]:
    """The documents of a multi-document config as Talos's decoder reads them; raises ``PatchError``."""
    try:
        documents = load_documents(config_yaml)
    except yaml.YAMLError as exc:
        raise PatchError(f"malformed config: {describe_yaml_error(exc)}") from exc
    for index, document in enumerate(documents):
        if not isinstance(document, dict):
            raise PatchError(f"malformed config: document {index + 1} is not a map")
        _normalise(document)
    return documents


def apply_patches(config: str | Sequence[dict[str, Any]], patches: Sequence[Patch]) -> str:
    """Apply patches in order to a multi-document config (its YAML, or its documents as ``load_config``
    reads them, left untouched); the patched config as multi-document YAML."""
    documents = load_config(config) if isinstance(config, str) else config
    return dump_documents(patch_documents(documents, patches))


def patch_documents(documents: Sequence[dict[str, Any]], patches: Sequence[Patch]) -> list[dict[str, Any]]:
    """Apply patches in order to config documents (left untouched); the patched documents.

    As Talos encodes a config, the legacy v1alpha1 document comes first, the others keep their order.
    """
    current = [copy.deepcopy(doc) for doc in documents]
    ids = _identities(current)
    for patch in patches:
        if isinstance(patch, JSON6902Patch):
            current = [_apply_json6902(current, patch)]
        else:
            _apply_strategic(current, patch)
        ids = _identities(current)
    return [current[i] for i in sorted(range(len(current)), key=lambda i: not ids[i].legacy)]


def _identities(documents: list[dict[str, Any]]) -> list[DocumentID]:
    ids: list[DocumentID] = []
    for document in documents:
        try:
            ident = document_id(document)
        except ValueError as exc:
            raise PatchError(f"invalid config: {exc}") from exc
        if ident in ids:
            raise PatchError(f"invalid config: duplicate document {ident}")
        ids.append(ident)
    return ids


def _apply_json6902(documents: list[dict[str, Any]], patch: JSON6902Patch) -> dict[str, Any]:
    if len(documents) != 1:
        raise PatchError("JSON6902 patches are not supported for multi-document machine configuration")
    try:
        patched = jsonpatch.apply_patch(documents[0], list(patch.operations))
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise PatchError(f"failure applying rfc6902 patches to talos machine config: {exc}") from exc
    if not isinstance(patched, dict):
        raise PatchError("failure applying rfc6902 patches to talos machine config: the result is not a map")
    return patched


def _apply_strategic(documents: list[dict[str, Any]], patch: StrategicMergePatch) -> None:
    for step in patch.steps:
        if isinstance(step, DeleteSelector):
            index = _index_of(documents, step.document)
            # Talos skips deletes aimed at documents the config does not have.
            if index is None:
                continue
            if step.path:
                _delete(documents[index], step)
            else:
                del documents[index]
            continue
        ident = document_id(step)
        index = _index_of(documents, ident)
        if index is None:
            documents.append(copy.deepcopy(step))
            continue
        try:
            merge_document(documents[index], step, ident.kind)
        except MergeError as exc:
            raise PatchError(f"merge of document '{ident}': {exc}") from exc


def _index_of(documents: list[dict[str, Any]], ident: DocumentID) -> int | None:
    for index, document in enumerate(documents):
        if document_id(document) == ident:
            return index
    return None


def _delete(document: dict[str, Any], selector: DeleteSelector) -> None:
    def failed(reason: str) -> PatchError:
        path = selector.dotted_path
        return PatchError(
            f"patch delete: path '{path}' in document '{selector.document}': "
            f"failed to delete path '{path}': {reason}"
        )

    node: Any = document
    for depth, segment in enumerate(selector.path):
        last = depth == len(selector.path) - 1
        if isinstance(node, list):
            if not last:
                raise failed("searching for complex paths in slices is not supported")
            for index, item in enumerate(node):
                if (
                    isinstance(item, dict)
                    and selector.key in item
                    and _scalar_text(item[selector.key]) == selector.value
                ):
                    del node[index]
                    return
            raise failed("lookup failed")
        if not isinstance(node, dict):
            raise failed("lookup failed")
        if last:
            # Talos zeroes a struct field whether or not it is set, so deleting an absent key is no error.
            node.pop(segment, None)
            return
        node = node.get(segment)
        if node is None:
            raise failed("lookup failed")


def _split_deletes(document: dict[str, Any], index: int) -> list[DeleteSelector | dict[str, Any]]:
    """The delete selectors of one patch document, then what remains of it (if anything)."""
    found: list[tuple[tuple[str, ...], dict[str, Any], bool]] = []
    emptied = _take_deletes(document, (), False, found)
    steps: list[DeleteSelector | dict[str, Any]] = [
        _selector(document, path, node, in_list) for path, node, in_list in found
    ]
    if emptied or all(
        key in ("version", "kind", "name") and not isinstance(value, dict | list)
        for key, value in document.items()
    ):
        return steps
    try:
        ident = document_id(document)
    except ValueError as exc:
        raise PatchError(f"malformed patch: document {index + 1}: {exc}") from exc
    if ident.legacy:
        unknown = sorted(set(document) - LEGACY_KEYS)
        if unknown:
            raise PatchError(f"malformed patch: unknown keys in the v1alpha1 document: {', '.join(unknown)}")
        _normalise(document)
    steps.append(document)
    return steps


def _take_deletes(
    node: Any,
    path: tuple[str, ...],
    in_list: bool,
    found: list[tuple[tuple[str, ...], dict[str, Any], bool]],
) -> bool:
    """Record and remove the ``$patch: delete`` marks under ``node``; whether ``node`` itself must go.

    A container emptied by the removal goes too, as in Talos's loader.
    """
    if isinstance(node, dict):
        for key in list(node):
            value = node[key]
            if key == "$patch":
                if value != "delete":
                    raise PatchError(f"malformed patch: unsupported '$patch: {value}' at '{'.'.join(path)}'")
                if not in_list and any(segment.startswith("[") for segment in path):
                    raise PatchError(f"malformed patch: cannot delete an inner key in '{'.'.join(path)}'")
                found.append((path, node, in_list))
                return True
            if _take_deletes(value, (*path, str(key)), False, found):
                del node[key]
                if not node:
                    return True
    elif isinstance(node, list):
        index = 0
        while index < len(node):
            if _take_deletes(node[index], (*path, f"[{index}]"), True, found):
                del node[index]
                if not node:
                    return True
            else:
                index += 1
    return False


def _selector(
    root: dict[str, Any], path: tuple[str, ...], node: dict[str, Any], in_list: bool
) -> DeleteSelector:
    where = ".".join(path)
    api_version = str(root.get("apiVersion") or "")
    kind = str(root.get("kind") or "")
    if not path and not (api_version and kind):
        raise PatchError(
            "malformed patch: a document deleted with '$patch: delete' needs apiVersion and kind "
            "(the v1alpha1 document cannot be deleted)"
        )
    if not api_version and not kind:
        kind = LEGACY_KIND
    elif not (api_version and kind):
        raise PatchError(f"malformed patch: kind and apiVersion must be both set for path {where}")
    name = root.get("name")
    ident = DocumentID(api_version, kind, "" if name is None else str(name))
    if not in_list:
        return DeleteSelector(ident, path)
    for key, value in node.items():
        if key != "$patch":
            return DeleteSelector(ident, path, str(key), _scalar_text(value))
    raise PatchError(f"malformed patch: no key:value selects the list element to delete at {where}")


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return ""
    return "" if value is None else str(value)


def _check_operation(index: int, operation: Any) -> dict[str, Any]:
    where = f"malformed JSON patch: operation {index + 1}"
    if not isinstance(operation, dict):
        raise PatchError(f"{where} is not a map")
    op = operation.get("op")
    if op not in _JSON_OPS:
        raise PatchError(f"{where}: unknown op {op!r}, expected one of {', '.join(_JSON_OPS)}")
    for field in ("path", *_JSON_OPS[op]):
        if field not in operation:
            raise PatchError(f"{where} ({op}) lacks {field!r}")
    for field in ("path", "from"):
        pointer = operation.get(field, "")
        if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
            raise PatchError(f"{where}: {field} {pointer!r} is not a JSON pointer")
    return operation


def _normalise(document: dict[str, Any]) -> None:
    """Apply what Talos's decoder does to a legacy document: inline manifests lose leading blank lines."""
    cluster = document.get("cluster")
    manifests = cluster.get("inlineManifests") if isinstance(cluster, dict) else None
    for manifest in manifests if isinstance(manifests, list) else ():
        if isinstance(manifest, dict) and isinstance(manifest.get("contents"), str):
            manifest["contents"] = manifest["contents"].lstrip("\t\n\v\f\r")
