"""The hooks through which a server built on ``krm`` decides who may do what.

``krm`` itself knows no users or roles: it asks its ``AccessPolicy`` to authenticate each request,
to authorize each verb, to hide objects a caller may not know of, and to record what happened.
``AllowAll`` serves an unauthenticated API (the emulator's tests, local experiments).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from starlette.requests import Request

from herder.resources import KindInfo, Resource

# The verbs of the Kubernetes API, as authorization sees them.
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")


@dataclass(frozen=True)
class Identity:
    """Who is calling: a name, a role, and for scoped roles what they are scoped to."""

    name: str
    role: str
    scope: dict[str, str] = field(default_factory=dict)
    # Who acts as this identity through impersonation (Kubernetes' Impersonate-User), if anyone.
    impersonator: str = ""
    # What the identity is labelled with (a server's policies may select identities by them).
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Access:
    """One request as authorization sees it; ``subresource`` is "status" for the status subresource."""

    verb: str
    kind: KindInfo
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None


class Unauthenticated(Exception):
    """No valid credentials (401)."""


class Denied(Exception):
    """Authenticated, but not allowed (403); the message says why without naming hidden objects."""


class AccessPolicy(Protocol):
    async def authenticate(self, request: Request) -> Identity:
        """Who sent this request; raise ``Unauthenticated`` when nobody valid did."""

    def authorize(self, who: Identity, access: Access, obj: Resource | None = None) -> None:
        """Raise ``Denied`` unless ``who`` may do ``access`` (to ``obj`` when it is known).

        list and watch pass no object; get and delete the stored one; create the new one; update and
        patch call it twice, with the stored object and then with the object as it would become (a
        server-side apply that creates its object is a patch, and then a create, of the new one);
        deletecollection is asked once without an object, then for each object it would delete.
        """

    def admit(self, who: Identity, access: Access, current: Resource | None, new: Resource) -> None:
        """Raise ``Denied`` unless ``who`` may turn ``current`` (None on create) into ``new``."""

    def visible(self, who: Identity, kind: KindInfo, name: str, labels: Mapping[str, str]) -> bool:
        """Whether ``who`` may know that object ``name`` of ``kind`` exists at all (hidden ones: no).

        Decided from the object's labels, which a list has at hand without decoding the object.
        """

    def redaction(self, who: Identity, kind: KindInfo) -> Callable[[Resource], Resource] | None:
        """How objects of ``kind`` are cut down for ``who`` (a copy without the fields it may not read,
        a provider's credentials), or None when it reads them whole (then their stored encodings serve)."""

    def actor(self, who: Identity) -> str:
        """The writer name the store checks controller ownership against."""

    async def record(
        self,
        who: Identity | None,
        access: Access | None,
        request: Request,
        status: int,
        message: str = "",
        *,
        changed: bool = True,
    ) -> None:
        """Audit one request once its outcome is known; ``changed``: False for a write that found the
        object already as asked (it stored nothing)."""


class AllowAll:
    """Everyone is an anonymous admin, nothing is hidden, nothing is recorded."""

    ANONYMOUS = Identity("anonymous", "Admin")

    async def authenticate(self, request: Request) -> Identity:
        return self.ANONYMOUS

    def authorize(self, who: Identity, access: Access, obj: Resource | None = None) -> None:
        return None

    def admit(self, who: Identity, access: Access, current: Resource | None, new: Resource) -> None:
        return None

    def visible(self, who: Identity, kind: KindInfo, name: str, labels: Mapping[str, str]) -> bool:
        return True

    def redaction(self, who: Identity, kind: KindInfo) -> Callable[[Resource], Resource] | None:
        return None

    def actor(self, who: Identity) -> str:
        return f"user:{who.name}"

    async def record(
        self,
        who: Identity | None,
        access: Access | None,
        request: Request,
        status: int,
        message: str = "",
        *,
        changed: bool = True,
    ) -> None:
        return None
