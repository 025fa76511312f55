"""Errors of the object model: an unknown kind, and an invalid object with one cause per field."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FieldError:
    """One reason an object is invalid, named by its field path (``spec.talosVersion``)."""

    field: str
    message: str
    reason: str = "FieldValueInvalid"

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class UnknownKind(LookupError):
    """A kind, plural or apiVersion that the registry does not know."""

    def __init__(self, what: str) -> None:
        super().__init__(f"unknown kind {what!r}")
        self.what = what


class InvalidObject(ValueError):
    """An object that fails validation; ``causes`` names every offending field."""

    def __init__(self, kind: str, name: str, causes: list[FieldError]) -> None:
        self.kind = kind
        self.name = name
        self.causes = causes
        detail = "; ".join(str(c) for c in causes)
        super().__init__(f'{kind} "{name}" is invalid: {detail}')
