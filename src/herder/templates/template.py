"""Reading a template file: its YAML documents (YAML 1.2, as Omni's decoder reads them; a repeated key is
an error), each decoded strictly as its kind, and the contents of its patch files, which are resolved
relative to the template and confined to its folder.

Reading collects every problem it meets instead of stopping at the first: a document that fails to
decode is reported field by field and left out, and the others are still read.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import ValidationError

from herder.talos.documents import UniqueKeyLoader, describe_yaml_error, dump_documents
from herder.templates.documents import (
    DEFAULT_WORKERS,
    KINDS,
    ClusterDoc,
    ControlPlaneDoc,
    Document,
    MachineDoc,
    PatchDoc,
    WorkersDoc,
)
from herder.templates.kubernetes import read_health_checks, read_manifests
from herder.templates.problems import Problems, field_path

D = TypeVar("D", bound=Document)
_PARTIAL_PASSES = 4
STAND_IN = "cluster"
"""The cluster name the rest of a template is checked with when its Cluster document's is missing or
invalid (and reported)."""
# Values put in place of a required field whose value is invalid (and reported), per kind, so that the
# rest of the document is still checked: the cluster's name, and its versions (empty: the version checks
# leave fields alone that have an error already).
_STAND_INS: dict[str, dict[tuple[int | str, ...], Any]] = {
    "Cluster": {("name",): STAND_IN, ("talos", "version"): "", ("kubernetes", "version"): ""},
}


@dataclass(frozen=True)
class Source:
    """One document of the file, where it is: its position (1-based) and first line."""

    index: int
    line: int
    document: Document
    written_name: Any = None
    """The document's name as written (which a stand-in replaced if it was invalid)."""

    @property
    def label(self) -> str:
        return document_label(self.document.kind, self.written_name, self.index)


def document_label(kind: str, name: Any, index: int) -> str:
    """How problems name a document: ``Workers "gpu" (document 3)``."""
    if kind == "ControlPlane":
        return f"ControlPlane (document {index})"
    if not isinstance(name, str):
        name = DEFAULT_WORKERS if kind == "Workers" else "?"
    return f'{kind} "{name}" (document {index})'


@dataclass
class Template:
    path: Path
    sources: list[Source] = field(default_factory=list)
    # The text of each patch, by (document index, patch index); missing when it could not be read.
    patch_texts: dict[tuple[int, int], str] = field(default_factory=dict)
    # The objects of each of the Cluster document's kubernetes.manifests, and the Job of each of its
    # kubernetes.healthchecks, by position (missing when unreadable: reported).
    manifests: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    health_checks: dict[int, dict[str, Any]] = field(default_factory=dict)
    # The kind of each document too broken to be read at all (its errors are reported).
    unreadable: list[str] = field(default_factory=list)
    readable: bool = True
    """False when the file could not be read or parsed as YAML: there is nothing to check then."""

    def of(self, kind: type[D]) -> list[tuple[Source, D]]:
        return [(s, s.document) for s in self.sources if isinstance(s.document, kind)]

    @property
    def cluster(self) -> ClusterDoc | None:
        found = self.of(ClusterDoc)
        return found[0][1] if len(found) == 1 else None

    @property
    def control_plane(self) -> ControlPlaneDoc | None:
        found = self.of(ControlPlaneDoc)
        return found[0][1] if len(found) == 1 else None

    @property
    def workers(self) -> list[WorkersDoc]:
        return [doc for _, doc in self.of(WorkersDoc)]

    @property
    def machines(self) -> list[MachineDoc]:
        return [doc for _, doc in self.of(MachineDoc)]

    def patches(self, source: Source) -> list[tuple[PatchDoc, str | None]]:
        """A document's patches, each with its text (None when it could not be read)."""
        return [
            (patch, self.patch_texts.get((source.index, i)))
            for i, patch in enumerate(source.document.patches)
        ]

    def source_of(self, document: Document) -> Source:
        return next(s for s in self.sources if s.document is document)


def read_template(path: Path) -> tuple[Template, Problems]:
    """The template in ``path`` and the problems met reading it."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems = Problems(str(path))
        problems.error("", "", f"cannot read the template: {getattr(exc, 'strerror', None) or exc}")
        return Template(path, readable=False), problems
    return parse_template(text, path)


def parse_template(text: str, path: Path) -> tuple[Template, Problems]:
    """The template of ``text``, read as if from ``path`` (its patch files are found from there)."""
    problems = Problems(str(path))
    template = Template(path)
    documents = _documents(text, problems)
    template.readable = not problems.errors
    for index, line, data in documents:
        source = _decode(index, line, data, problems)
        if source is not None:
            template.sources.append(source)
        elif isinstance(data, dict) and isinstance(data.get("kind"), str):
            template.unreadable.append(data["kind"])
    for source in template.sources:
        for i, patch in enumerate(source.document.patches):
            content = _patch_text(path, source, i, patch, problems)
            if content is not None:
                template.patch_texts[(source.index, i)] = content
    cluster = template.cluster
    if cluster is not None:
        where = template.source_of(cluster).label
        template.manifests = read_manifests(path, cluster, where, problems)
        template.health_checks = read_health_checks(path, cluster, where, problems)
    return template, problems


def _documents(text: str, problems: Problems) -> list[tuple[int, int, Any]]:
    """(position, line, data) of every non-empty document, or none if the YAML does not parse."""
    loader = UniqueKeyLoader(text)
    out: list[tuple[int, int, Any]] = []
    try:
        index = 0
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                break
            index += 1
            data = loader.construct_document(node)
            if data is not None:
                out.append((index, node.start_mark.line + 1, data))
    except yaml.YAMLError as exc:
        problems.error("", "", f"invalid YAML: {describe_yaml_error(exc)}")
        return []
    finally:
        loader.dispose()
    return out


def _decode(index: int, line: int, data: Any, problems: Problems) -> Source | None:
    where = f"document {index} (line {line})"
    if not isinstance(data, dict):
        problems.error(where, "", f"a template document is a map with a kind, not a {type(data).__name__}")
        return None
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        known = ", ".join(KINDS)
        problems.error(where, "kind", f"unknown kind {kind!r}: expected one of {known}")
        return None
    where = document_label(kind, data.get("name"), index)
    model = KINDS[kind]
    try:
        return Source(index, line, model.model_validate(data), data.get("name"))
    except ValidationError as exc:
        errors = exc.errors()
    for error in errors:
        message = "unknown field" if error["type"] == "extra_forbidden" else error["msg"]
        problems.error(where, field_path(error["loc"]), message.removeprefix("Value error, "))
    # The rest of the document is still checked, so that one bad field does not hide the others: bad
    # values are left out (and a part that then lacks a required field, with it) until it decodes.
    partial = data
    stand_ins = _STAND_INS.get(kind, {})
    for _ in range(_PARTIAL_PASSES):
        doomed = [e["loc"] for e in errors if e["type"] != "missing"]
        partial = _without(partial, doomed)
        for error in errors:
            if error["type"] != "missing":
                continue
            if error["loc"] in stand_ins:
                partial = _with(partial, error["loc"], stand_ins[error["loc"]])
            else:
                partial = _without(partial, [error["loc"][:-1]])
        try:
            return Source(index, line, model.model_validate(partial), data.get("name"))
        except ValidationError as exc:
            errors = exc.errors()
    return None


def _with(data: dict[str, Any], location: tuple[int | str, ...], value: Any) -> dict[str, Any]:
    """A copy of ``data`` with ``value`` at ``location`` (in maps only; made where missing)."""
    out = copy.deepcopy(data)
    node: Any = out
    for part in location[:-1]:
        if not isinstance(node, dict):
            return out
        node = node.setdefault(part, {})
    if isinstance(node, dict):
        node[location[-1]] = value
    return out


def _holds(node: Any, part: int | str) -> bool:
    if isinstance(node, dict):
        return part in node
    return isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)


def _without(data: dict[str, Any], locations: list[tuple[int | str, ...]]) -> dict[str, Any]:
    """A copy of ``data`` without the values at ``locations`` (as deep as each location resolves)."""
    out = copy.deepcopy(data)
    doomed: list[tuple[Any, int | str]] = []
    for location in locations:
        parent: Any = None
        key: int | str = ""
        node: Any = out
        for part in location:
            if not _holds(node, part):
                break
            parent, key, node = node, part, node[part]
        if parent is not None:
            doomed.append((parent, key))
    # Later list items go first, so that the positions of the earlier ones still hold.
    for parent, key in sorted(doomed, key=lambda d: d[1] if isinstance(d[1], int) else -1, reverse=True):
        if isinstance(parent, dict):
            parent.pop(key, None)
        elif isinstance(key, int) and key < len(parent):
            del parent[key]
    return out


def _patch_text(path: Path, source: Source, i: int, patch: PatchDoc, problems: Problems) -> str | None:
    where, at = source.label, f"patches[{i}]"
    if patch.file and patch.inline is not None:
        problems.error(where, at, "file and inline are mutually exclusive")
        return None
    if not patch.file and patch.inline is None:
        problems.error(where, at, "a patch needs file or inline")
        return None
    if patch.inline is not None:
        if not (patch.name or patch.id_override):
            problems.error(where, at, "an inline patch needs a name or an idOverride")
        if isinstance(patch.inline, str):
            return patch.inline
        return dump_documents([patch.inline])
    folder = path.parent.resolve()
    target = (folder / patch.file).resolve()
    if not target.is_relative_to(folder):
        problems.error(
            where,
            f"{at}.file",
            f"{patch.file!r} is outside the template's folder {folder}: patch files must be inside it",
        )
        return None
    try:
        return target.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.error(
            where, f"{at}.file", f"cannot read {patch.file!r}: {getattr(exc, 'strerror', None) or exc}"
        )
        return None
