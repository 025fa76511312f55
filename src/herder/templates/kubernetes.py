"""The Kubernetes part of a template's Cluster document, read: each of ``kubernetes.manifests`` as the objects it
holds (inline, as a list or multi-document YAML text, or from a file inside the template's folder) and each of
``kubernetes.healthchecks`` as its Job. Every problem names the template's document, the field, and for
the objects the manifest's file (or ``inline``), the YAML document in it and the object's field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from herder.resources.manifests import job_problems, object_problems
from herder.talos.documents import UniqueKeyLoader, describe_yaml_error
from herder.templates.documents import ClusterDoc
from herder.templates.problems import Problems


def _load_all(text: str) -> list[Any]:
    loader = UniqueKeyLoader(text)
    out: list[Any] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                break
            out.append(loader.construct_document(node))
    finally:
        loader.dispose()
    return out


def _file_text(template_path: Path, name: str, where: str, at: str, problems: Problems) -> str | None:
    folder = template_path.parent.resolve()
    target = (folder / name).resolve()
    if not target.is_relative_to(folder):
        problems.error(
            where, at, f"{name!r} is outside the template's folder {folder}: files must be inside it"
        )
        return None
    try:
        return target.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.error(where, at, f"cannot read {name!r}: {getattr(exc, 'strerror', None) or exc}")
        return None


def _source(
    template_path: Path, inline: Any, file: str, key: str, where: str, at: str, problems: Problems
) -> tuple[list[Any], str] | None:
    """The documents of an entry (its inline value or file) and how problems name their origin."""
    if file and inline is not None:
        problems.error(where, at, f"file and {key} are mutually exclusive")
        return None
    if not file and inline is None:
        problems.error(where, at, f"needs {key} or file")
        return None
    if isinstance(inline, list):
        return inline, f"{at}.{key}"
    if isinstance(inline, dict):
        return [inline], f"{at}.{key}"
    origin = f"{at}.{key}" if not file else f"{at}.file"
    text = inline if isinstance(inline, str) else _file_text(template_path, file, where, origin, problems)
    if text is None:
        return None
    try:
        return [d for d in _load_all(text) if d is not None], origin
    except yaml.YAMLError as exc:
        named = f"file {file!r}" if file else "inline text"
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        if mark is not None:
            before = text.splitlines()[: mark.line]
            named += f", document {1 + sum(1 for line in before if line.startswith('---'))}"
        problems.error(where, origin, f"{named}: not YAML: {describe_yaml_error(exc)}")
        return None


def read_manifests(
    template_path: Path, cluster: ClusterDoc, where: str, problems: Problems
) -> dict[int, list[dict[str, Any]]]:
    """The objects of each manifest, by its position; a manifest with a problem is left out (and reported)."""
    out: dict[int, list[dict[str, Any]]] = {}
    names: set[str] = set()
    for i, manifest in enumerate(cluster.kubernetes.manifests):
        at = f"kubernetes.manifests[{i}]"
        if manifest.name in names:
            problems.error(where, f"{at}.name", f'another manifest is named "{manifest.name}"')
        names.add(manifest.name)
        found = _source(template_path, manifest.inline, manifest.file, "inline", where, at, problems)
        if found is None:
            continue
        documents, origin = found
        good = True
        for n, obj in enumerate(documents):
            for field, reason in object_problems(obj):
                good = False
                if isinstance(manifest.inline, list):
                    problems.error(where, f"{origin}[{n}]" + (f".{field}" if field else ""), reason)
                    continue
                named = f"file {manifest.file!r}" if manifest.file else "inline text"
                problems.error(
                    where, origin, f"{named}, document {n + 1}: " + (f"{field}: " if field else "") + reason
                )
        if not documents:
            problems.error(where, origin, "holds no objects")
            good = False
        if good:
            out[i] = documents
    return out


def read_health_checks(
    template_path: Path, cluster: ClusterDoc, where: str, problems: Problems
) -> dict[int, dict[str, Any]]:
    """The Job of each health check, by its position; one with a problem is left out (and reported)."""
    out: dict[int, dict[str, Any]] = {}
    names: set[str] = set()
    for i, check in enumerate(cluster.kubernetes.healthchecks):
        at = f"kubernetes.healthchecks[{i}]"
        if not check.title:
            problems.error(where, at, "a health check needs a name or an idOverride")
            continue
        if check.title in names:
            problems.error(where, f"{at}.name", f'another health check is named "{check.title}"')
        names.add(check.title)
        found = _source(template_path, check.job, check.file, "job", where, at, problems)
        if found is None:
            continue
        documents, origin = found
        if len(documents) != 1:
            problems.error(where, origin, f"holds {len(documents)} documents: a health check is one Job")
            continue
        problems_of_job = job_problems(documents[0])
        for field, reason in problems_of_job:
            named = f"file {check.file!r}, document 1: " if check.file else ""
            problems.error(where, origin, named + (f"{field}: " if field else "") + reason)
        if not problems_of_job:
            out[i] = documents[0]
    return out
