"""Form fields generated from an infra provider's JSON schema of ``providerData``, and the posted values
read back into data of the types the schema asks for.

Each top-level property becomes one field: a choice for an ``enum``, a checkbox for a boolean, a number
input (with the schema's bounds) for an integer or number, a text input for a string, and a JSON text
area for anything else (objects, arrays). The provider's schema is the judge: the API checks the class's
data against it and names the field it refuses; here a value is only converted, and one that cannot be
(``four`` for an integer) is refused naming its field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from herder.web.views import BadInput

PREFIX = "providerData."


@dataclass(frozen=True)
class Field:
    name: str
    input: str  # select, checkbox, number, text, json
    label: str
    description: str = ""
    required: bool = False
    default: str = ""
    choices: tuple[str, ...] = ()
    minimum: str = ""
    maximum: str = ""
    step: str = ""

    @property
    def form_name(self) -> str:
        return PREFIX + self.name


def _schema(schema: object) -> dict[str, Any]:
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            return {}
    return schema if isinstance(schema, dict) else {}


def fields(schema: object) -> list[Field]:
    """The fields of a provider's schema, in its order."""
    parsed = _schema(schema)
    required = set(parsed.get("required") or [])
    out = []
    for name, prop in (parsed.get("properties") or {}).items():
        if not isinstance(prop, dict):
            continue
        kind = prop.get("type")
        default = prop.get("default")
        common = {
            "name": name,
            "label": str(prop.get("title") or name),
            "description": str(prop.get("description") or ""),
            "required": name in required,
        }
        if prop.get("enum"):
            shown = "" if default is None else str(default)
            out.append(
                Field(input="select", choices=tuple(str(c) for c in prop["enum"]), default=shown, **common)
            )
        elif kind == "boolean":
            out.append(Field(input="checkbox", default="true" if default else "", **common))
        elif kind in ("integer", "number"):
            out.append(
                Field(
                    input="number",
                    default="" if default is None else str(default),
                    minimum=str(prop.get("minimum", "")),
                    maximum=str(prop.get("maximum", "")),
                    step="1" if kind == "integer" else "any",
                    **common,
                )
            )
        elif kind == "string":
            out.append(Field(input="text", default=str(default or ""), **common))
        else:
            out.append(
                Field(input="json", default=json.dumps(default) if default is not None else "", **common)
            )
    return out


def values(schema: object, form: dict[str, list[str]]) -> dict[str, Any]:
    """The provider data a form posted, typed as the schema says; empty optional fields are left out."""
    parsed = _schema(schema)
    props = parsed.get("properties") or {}
    out: dict[str, Any] = {}
    for field in fields(schema):
        raw = (form.get(field.form_name) or [""])[0].strip()
        where = f"{field.form_name}"
        kind = (props.get(field.name) or {}).get("type")
        if field.input == "checkbox":
            out[field.name] = raw == "true"
            continue
        if not raw:
            if field.required:
                raise BadInput(f"{where}: is required")
            continue
        if field.input == "select":
            match = next((c for c in props[field.name]["enum"] if str(c) == raw), None)
            if match is None:
                raise BadInput(f"{where}: {raw!r} is not one of {', '.join(field.choices)}")
            out[field.name] = match
        elif kind == "integer":
            try:
                out[field.name] = int(raw)
            except ValueError:
                raise BadInput(f"{where}: {raw!r} is not a whole number") from None
        elif kind == "number":
            try:
                out[field.name] = float(raw)
            except ValueError:
                raise BadInput(f"{where}: {raw!r} is not a number") from None
        elif field.input == "json":
            try:
                out[field.name] = json.loads(raw)
            except ValueError as exc:
                raise BadInput(f"{where}: not JSON ({exc})") from None
        else:
            out[field.name] = raw
    return out
