"""Checking data against the JSON schemas an infra provider publishes: its request data
(``status.schema``) and its own config (``status.configSchema``).

Errors name the field as the API names it (``spec.providerData.cpus``). What a config holds may be
secret, so errors about a config never quote its values.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import jsonschema
import yaml

from herder.resources import FieldError


class SchemaUnusable(ValueError):
    """A published schema that is not a JSON schema (the provider's mistake, not the caller's)."""


def validator_of(published: dict[str, Any] | str | None) -> Any:
    """The validator of a published schema (an object, or its JSON or YAML text), or None when none is
    published; raises ``SchemaUnusable``."""
    if published is None or published == "" or published == {}:
        return None
    return _validator(published if isinstance(published, str) else json.dumps(published, sort_keys=True))


@functools.lru_cache(maxsize=64)
def _validator(text: str) -> Any:
    # Checking a schema costs milliseconds: each one published is checked once.
    try:
        schema: Any = json.loads(text)
    except ValueError:
        try:
            schema = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SchemaUnusable(f"the published schema is neither JSON nor YAML: {exc}") from None
    if not isinstance(schema, dict):
        raise SchemaUnusable("the published schema is not an object")
    kind = jsonschema.validators.validator_for(schema)
    try:
        kind.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise SchemaUnusable(f"the published schema is not a valid JSON schema: {exc.message}") from None
    return kind(schema)


def check(
    published: dict[str, Any] | str | None, data: Any, prefix: str, *, quote_values: bool = True
) -> list[FieldError]:
    """What in ``data`` the schema refuses, each error naming its field under ``prefix``."""
    validator = validator_of(published)
    if validator is None:
        return []
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
