"""The infra provider SDK: write a ``Provider`` (typed request data and config, ordered steps,
deprovision, power), run it with ``run_provider`` against herder's public API. Providers are found by
name among the entry points of group ``herder.providers``."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

from herder.infra.config import ConfigError, load_config
from herder.infra.provider import Fail, JoinConfig, NoConfig, Provider, RequestContext, Retry, Step
from herder.infra.runner import ProviderRunner, RunOptions, run_provider

ENTRY_POINTS = "herder.providers"


class UnknownProvider(LookupError):
    """No provider of that name is installed."""


def provider_types() -> list[str]:
    return sorted(e.name for e in entry_points(group=ENTRY_POINTS))


def load_provider(name: str) -> type[Provider[Any, Any]]:
    """The provider class an entry point of group ``herder.providers`` names."""
    found = [e for e in entry_points(group=ENTRY_POINTS) if e.name == name]
    if not found:
        raise UnknownProvider(
            f"no infra provider {name!r} is installed (entry points {ENTRY_POINTS}: "
            f"{', '.join(provider_types()) or 'none'})"
        )
    loaded = found[0].load()
    if not (isinstance(loaded, type) and issubclass(loaded, Provider)):
        raise UnknownProvider(f"entry point {name!r} of {ENTRY_POINTS} is not a herder.infra.Provider")
    return loaded


__all__ = [
    "ENTRY_POINTS",
    "ConfigError",
    "Fail",
    "JoinConfig",
    "NoConfig",
    "Provider",
    "ProviderRunner",
    "RequestContext",
    "Retry",
    "RunOptions",
    "Step",
    "UnknownProvider",
    "load_config",
    "load_provider",
    "provider_types",
    "run_provider",
]
