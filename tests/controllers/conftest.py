"""Controller unit tests run on the in-memory store (see ``site``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.controllers.site import Site


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    made = await Site.start()
    try:
        yield made
    finally:
        await made.close()
