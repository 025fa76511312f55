"""What is wrong with a template, said so a user can find it: the file, the document (its kind and name),
the field and the reason. Errors stop a template from being rendered or synced; warnings do not."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Problem:
    file: str
    document: str
    """``Cluster "alpha"``, ``Workers "gpu"``, ``document 3``… or empty for the whole file."""
    field: str
    message: str

    def __str__(self) -> str:
        where = ": ".join(part for part in (self.file, self.document, self.field) if part)
        return f"{where}: {self.message}"

    @property
    def position(self) -> int:
        """The document's position in the file; problems of the whole file come after all documents'."""
        found = re.search(r"\(document (\d+)", self.document)
        return int(found.group(1)) if found else 1 << 30


def field_path(loc: Iterable[Any]) -> str:
    """A pydantic error location as a field path: ``patches[1].inline``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


@dataclass
class Problems:
    """The errors and warnings found in one template file."""

    file: str
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)

    def error(self, document: str, path: str, message: str) -> None:
        self.errors.append(Problem(self.file, document, path, message))

    def warn(self, document: str, path: str, message: str) -> None:
        self.warnings.append(Problem(self.file, document, path, message))

    def __bool__(self) -> bool:
        return bool(self.errors)

    def sort(self) -> None:
        """Order the problems by document, keeping the order they were found in within each."""
        self.errors.sort(key=lambda p: p.position)
        self.warnings.sort(key=lambda p: p.position)


class InvalidTemplate(ValueError):
    """A template with errors: every one of them, one per line."""

    def __init__(self, errors: list[Problem]) -> None:
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))
