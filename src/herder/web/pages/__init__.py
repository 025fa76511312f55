"""The UI's pages, one module per area; each gives its routes with ``routes(web)``."""

from __future__ import annotations

from herder.client.client import ObjectList


def revision(*lists: ObjectList) -> str:
    """The revision a page was rendered at: its live updates follow changes after it (herder has one
    revision for every kind, so the newest of the lists read covers them all)."""
    return str(max((int(listed.resource_version or 0) for listed in lists), default=0))
