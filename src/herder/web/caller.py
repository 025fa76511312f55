"""The signed-in user as the API sees them: their identity, a client that calls the API in-process with
their token, and what they may do.

Nothing here decides access by itself: ``can`` asks the API's own policy (the roles' table, read-only
objects, the infra provider's scope) the question the API would ask for that request, so that a button
is shown exactly when pressing it would be allowed, and a page lists exactly what the API would list.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.types import ASGIApp

from herder.api.policy import HerderPolicy
from herder.client import Client
from herder.client.kubeconfig import Credentials
from herder.krm.policy import Access, Denied, Identity
from herder.resources import KindRegistry, Resource
from herder.web.transport import StreamingASGITransport

# The URL the in-process client is given: the API app never sees a network, only this in its scope.
INTERNAL_URL = "https://herder.ui.internal"


def _client_address(request: Request) -> tuple[str, int]:
    return (request.client.host, request.client.port) if request.client else ("", 0)


async def authenticate(policy: HerderPolicy, token: str, request: Request) -> Identity:
    """Who ``token`` is, asked of the API's policy as a request from the same browser would ask it (a
    bad token counts towards its source's limit of failed authentications)."""
    scope = {
        "type": "http",
        "method": "GET",
        "path": request.url.path,
        "headers": [(b"authorization", f"Bearer {token}".encode())],
        "client": _client_address(request),
    }
    return await policy.authenticate(Request(scope))


@dataclass
class Caller:
    who: Identity
    client: Client
    policy: HerderPolicy
    registry: KindRegistry

    @classmethod
    def of(cls, who: Identity, token: str, request: Request, api: ASGIApp, policy: HerderPolicy) -> Caller:
        agent = f"herder-web ({request.headers.get('user-agent', '')[:200]})"
        transport = StreamingASGITransport(api, _client_address(request), agent)
        client = Client(Credentials(INTERNAL_URL, token), transport=transport)
        return cls(who, client, policy, client.registry)

    def can(self, verb: str, kind: str, obj: Resource | None = None, subresource: str | None = None) -> bool:
        """Whether the API would let this user do ``verb`` (to ``obj``, if given)."""
        return not self.why_not(verb, kind, obj, subresource)

    def why_not(
        self, verb: str, kind: str, obj: Resource | None = None, subresource: str | None = None
    ) -> str:
        """The API's refusal of ``verb`` on ``kind`` (or ``obj``), or "" when it is allowed."""
        info = self.registry.get(kind)
        namespace = (obj.namespace if obj is not None else "default") if info.namespaced else None
        access = Access(verb, info, namespace, obj.name if obj is not None else None, subresource)
        try:
            self.policy.authorize(self.who, access)
            if obj is not None:
                self.policy.authorize(self.who, access, obj)
        except Denied as exc:
            return str(exc)
        return ""

    @property
    def role(self) -> str:
        return self.who.role
