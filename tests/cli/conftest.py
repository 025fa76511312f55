"""One real server per CLI test module."""

from tests.api.conftest import server

__all__ = ["server"]
