"""Where a provider's config comes from: settings given to the runner itself (a command line's) over
herder's (``InfraProvider.spec.config``, readable by the provider alone below Admin), else a file (YAML
or JSON), else environment variables ``HERDER_PROVIDER_<FIELD>``
(one per field of the provider's config model, by its name or alias in upper case; values are JSON when
they parse as JSON, else text)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

ENV_PREFIX = "HERDER_PROVIDER_"


class ConfigError(ValueError):
    """A provider config that is missing or does not fit the provider's model (what is wrong, and where)."""


def _from_environment(model: type[BaseModel], environ: Mapping[str, str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        for key in {name, info.alias or name}:
            raw = environ.get(ENV_PREFIX + key.upper())
            if raw is None:
                continue
            try:
                found[info.alias or name] = json.loads(raw)
            except ValueError:
                found[info.alias or name] = raw
    return found


def load_config(
    model: type[BaseModel],
    from_herder: dict[str, Any] | None,
    file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> BaseModel:
    """The provider's config as its model: herder's when it has one, else the file's, else the
    environment's (``os.environ`` by default); ``overrides`` replace fields of whichever it is."""
    source = "InfraProvider spec.config"
    data: Any = from_herder
    if data is None and file is not None:
        source = str(file)
        try:
            data = yaml.safe_load(file.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read the provider config {file}: {exc}") from None
    if data is None:
        source = f"the environment ({ENV_PREFIX}…)"
        data = _from_environment(model, os.environ if environ is None else environ)
    if overrides:
        data = {**(data if isinstance(data, dict) else {}), **overrides}
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"the provider config from {source} is not valid: {problems}") from None
