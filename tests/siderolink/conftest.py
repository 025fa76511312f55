"""The join story is told in steps, as the cluster stories are (``tests/clusters/conftest.py``)."""

from tests.clusters.conftest import pytest_configure, pytest_runtest_makereport, pytest_runtest_setup

__all__ = ["pytest_configure", "pytest_runtest_makereport", "pytest_runtest_setup"]
