"""Checking data against the JSON schemas an infra provider publishes: its request data
(``status.schema``) and its own config (``status.configSchema``).

Errors name the field as the API names it (``spec.providerData.cpus``). What a config holds may be
secret, so errors about a config never quote its values.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import yaml

from herder.resources import FieldError


class SchemaUnusable(ValueError):
    """A published schema that is not a JSON schema (the provider's mistake, not the caller's)."""


def parse_schema(published: dict[str, Any] | str | None) -> dict[str, Any] | None:
    """The schema as an object (a provider may publish the text), or None when there is none."""
    if published is None or published == "" or published == {}:
        return None
    schema: Any = published
    if isinstance(published, str):
        try:
            schema = json.loads(published)
        except ValueError:
            try:
                schema = yaml.safe_load(published)
            except yaml.YAMLError as exc:
                raise SchemaUnusable(f"the published schema is neither JSON nor YAML: {exc}") from None
    if not isinstance(schema, dict):
        raise SchemaUnusable("the published schema is not an object")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise SchemaUnusable(f"the published schema is not a valid JSON schema: {exc.message}") from None
    return schema


def check(
    published: dict[str, Any] | str | None, data: Any, prefix: str, *, quote_values: bool = True
) -> list[FieldError]:
    """What in ``data`` the schema refuses, each error naming its field under ``prefix``."""
    schema = parse_schema(published)
    if schema is None:
        return []
    validator = jsonschema.validators.validator_for(schema)(schema)
    causes = []
    for error in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path))):
        path = [prefix, *map(str, error.absolute_path)]
        if error.validator == "required" and isinstance(error.instance, dict):
            missing = [p for p in error.validator_value if p not in error.instance]
            path.append(str(missing[0]) if missing else "")
            causes.append(FieldError(".".join(p for p in path if p), "is required", "FieldValueRequired"))
            continue
        if quote_values:
            message = error.message
        elif error.validator in ("type", "enum", "const", "format", "pattern"):
            message = f"must match {error.validator} {json.dumps(error.validator_value)}"
        else:
            message = f"does not satisfy the provider's schema ({error.validator})"
        causes.append(FieldError(".".join(path), message))
    return causes
