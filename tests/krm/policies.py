"""Access policies for tests, loaded by the server subprocess by name."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.requests import Request

from herder.krm.policy import Access, AllowAll, Denied, Identity, Unauthenticated
from herder.resources import KindInfo, Resource

LOCKED = "test.herder.dev/locked"
HIDDEN = "test.herder.dev/hidden"
READS = ("get", "list", "watch")


class Guarded(AllowAll):
    """Objects labelled ``LOCKED`` may not be written (nor created so); those labelled ``HIDDEN`` do not
    exist for anyone; the bearer token ``bad`` is refused.
    """

    async def authenticate(self, request: Request) -> Identity:
        if request.headers.get("authorization") == "Bearer bad":
            raise Unauthenticated("Unauthorized")
        return self.ANONYMOUS

    def authorize(self, who: Identity, access: Access, obj: Resource | None = None) -> None:
        if access.verb not in READS and obj is not None and obj.metadata.labels.get(LOCKED) == "true":
            raise Denied(f"{who.name} may not {access.verb} locked {access.kind.plural}")

    def visible(self, who: Identity, kind: KindInfo, name: str, labels: Mapping[str, str]) -> bool:
        return HIDDEN not in labels
