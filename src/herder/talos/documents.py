"""Machine config documents as Talos reads them: YAML 1.2 scalars, document identity, and encoding.

Talos decodes configs with a YAML 1.2 parser, where ``off``, ``yes`` or ``12:30`` are strings. PyYAML's
safe loader follows YAML 1.1 and would turn ``HostnameConfig``'s ``auto: off`` into ``false``, so the
patcher and the validator parse with a loader restricted to the YAML 1.2 core schema.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

LEGACY_KIND = "v1alpha1"
"""The ``kind`` Talos reports for the legacy document (``version: v1alpha1``, no ``apiVersion``/``kind``)."""

LEGACY_KEYS = frozenset({"version", "debug", "persist", "machine", "cluster"})
"""Top-level keys of the legacy document; any of machine/cluster/debug/persist marks a document as legacy."""

_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"


class _Yaml12Loader(yaml.CSafeLoader):
    """libyaml's safe loader with the YAML 1.2 core schema's implicit types instead of YAML 1.1's.

    libyaml parses ten times faster than PyYAML's own parser; the validator parses every config an
    emulated machine is given.
    """


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in {_BOOL, _INT, _FLOAT, _TIMESTAMP}]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Yaml12Loader.add_implicit_resolver(
    _INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
)
_Yaml12Loader.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+.0123456789"),
)


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    # YAML 1.2: a leading zero is decimal, octal needs ``0o`` (PyYAML would read ``010`` as 8).
    text = str(loader.construct_scalar(node))
    if text.startswith(("0o", "0x")):
        return int(text, 0)
    return int(text, 10)


_Yaml12Loader.add_constructor(_INT, _construct_int)


class UniqueKeyLoader(_Yaml12Loader):
    """The YAML 1.2 loader that also refuses a mapping repeating a key, as Go's YAML decoders do (a
    template or config read with PyYAML's defaults would silently keep the last value)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key!r}",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


class BlockDumper(yaml.SafeDumper):
    """Indents sequences under their key and writes multi-line strings as literal blocks, as Talos does."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    # A literal block cannot carry trailing spaces on a line; fall back to a quoted scalar then.
    literal = "\n" in data and not any(line != line.rstrip(" ") for line in data.split("\n"))
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if literal else None)


BlockDumper.add_representer(str, _represent_str)


def describe_yaml_error(exc: yaml.YAMLError) -> str:
    """A one-line description of a YAML syntax error, with its position."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"{exc.problem or exc.context} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(exc).split())


def load_documents(text: str) -> list[Any]:
    """The documents of a YAML stream, empty (null) documents skipped; raises ``yaml.YAMLError``."""
    return [doc for doc in yaml.load_all(text, Loader=_Yaml12Loader) if doc is not None]


def dump_documents(documents: Iterable[Any]) -> str:
    """A multi-document YAML stream, key order kept, documents separated by ``---``."""
    return "---\n".join(
        yaml.dump(
            doc,
            Dumper=BlockDumper,
            indent=4,
            sort_keys=False,
            default_flow_style=False,
            allow_unicode=True,
            width=1 << 30,
        )
        for doc in documents
    )


@dataclass(frozen=True)
class DocumentID:
    """Identity of a document within a config: ``apiVersion/kind[/name]``; the legacy one is ``/v1alpha1``."""

    api_version: str
    kind: str
    name: str = ""

    def __str__(self) -> str:
        ident = f"{self.api_version}/{self.kind}"
        return f"{ident}/{self.name}" if self.name else ident

    @property
    def legacy(self) -> bool:
        return self.kind == LEGACY_KIND and not self.api_version


LEGACY_ID = DocumentID("", LEGACY_KIND)


def is_legacy(document: dict[str, Any]) -> bool:
    """Whether a mapping is the legacy v1alpha1 document (Talos recognises it by its top-level keys)."""
    if "kind" in document:
        return False
    return document.get("apiVersion") == LEGACY_KIND or any(
        key in document for key in ("machine", "cluster", "debug", "persist")
    )


def document_id(document: dict[str, Any]) -> DocumentID:
    """The identity of a typed or legacy document; raises ``ValueError`` naming what is missing."""
    if is_legacy(document) or (document.get("version") == LEGACY_KIND and "kind" not in document):
        return LEGACY_ID
    kind = document.get("kind")
    api_version = document.get("apiVersion")
    if not kind:
        raise ValueError("missing kind")
    if not api_version:
        raise ValueError(f"missing apiVersion in document of kind {kind}")
    name = document.get("name")
    return DocumentID(str(api_version), str(kind), "" if name is None else str(name))
