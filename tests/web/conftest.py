"""One real ``herder serve`` for the module's HTTP tests of the UI, with a token for every role."""

from __future__ import annotations

from tests.api.conftest import server, tokens

__all__ = ["server", "tokens"]
