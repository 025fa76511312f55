"""YAML as templates and their objects are shown to people: key order kept, two-space indents with lists
indented under their key (as Omni writes templates), multi-line strings (patches) as literal blocks."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from herder.talos.documents import BlockDumper


def dump(data: Any) -> str:
    return yaml.dump(data, Dumper=BlockDumper, indent=2, sort_keys=False, allow_unicode=True, width=1 << 16)


def dump_all(documents: Iterable[Any]) -> str:
    """Documents separated by ``---``."""
    return "---\n".join(dump(document) for document in documents)
