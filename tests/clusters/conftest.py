"""End-to-end stories told in steps: the tests of a module marked ``steps`` drive one site in file order,
each step a test named for what it shows, so a failure names the step that broke; once one fails, the
later ones are skipped naming it (they would only fail for its reason, or say nothing)."""

from __future__ import annotations

import pytest

_FAILED: dict[str, str] = {}
"""The first step that failed, by module."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "steps: the module's tests are steps of one story, run in order")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("steps") is None:
        return
    failed = _FAILED.get(item.module.__name__ if isinstance(item, pytest.Function) else "")
    if failed is not None:
        pytest.skip(f"an earlier step failed: {failed}")


def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> None:
    if call.excinfo is None or item.get_closest_marker("steps") is None:
        return
    if isinstance(item, pytest.Function) and not call.excinfo.errisinstance(pytest.skip.Exception):
        _FAILED.setdefault(item.module.__name__, item.name)
