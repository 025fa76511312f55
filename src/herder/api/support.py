"""Support ("godmode"): platform staff acting inside an account, and only through what is audited.

The Support role is held by a server-level token (``herder serve --support-token-file FILE``), not by any
object of the account, so no Admin of the account can mint, see or revoke it. Its requests are all
audited. Support may act as any ServiceAccount or User of the account through Kubernetes impersonation
(``kubectl --as=NAME``, the ``Impersonate-User`` header): the request is then authorized as that identity
(hidden objects hidden, its role's limits), and audited under both names, so the account's Admins see
in ``herder audit`` what platform staff did in their account and as whom.
"""

from __future__ import annotations

import hashlib
import hmac
import stat
from dataclasses import replace
from pathlib import Path

from starlette.requests import Request

from herder.api import tokens
from herder.krm.policy import Denied, Identity
from herder.state.store import Store

SUPPORT_IDENTITY = "support:platform"
IMPERSONATE_USER = "impersonate-user"
_IMPERSONATE_OTHER = ("impersonate-group", "impersonate-uid")


class SupportTokenError(ValueError):
    """A support token file that cannot be used (missing, readable by others, empty)."""


def read_support_token(path: Path) -> str:
    """The Support token held in ``path``: a file only its owner may read, holding one token."""
    try:
        info = path.stat()
    except OSError as exc:
        raise SupportTokenError(f"--support-token-file {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise SupportTokenError(f"--support-token-file {path}: not a regular file")
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SupportTokenError(
            f"--support-token-file {path}: readable by others (mode {stat.S_IMODE(info.st_mode):o}); "
            "make it 0600"
        )
    token = path.read_text(encoding="utf-8", errors="replace").strip()
    if len(token) < 32 or any(c.isspace() for c in token):
        raise SupportTokenError(
            f"--support-token-file {path}: expected one token of at least 32 characters, e.g. from "
            "`head -c 32 /dev/urandom | base64`"
        )
    return token


class Support:
    """Recognises the Support token, and carries out impersonation for it."""

    def __init__(self, store: Store, token: str | None) -> None:
        self._store = store
        self._digest = hashlib.sha256(token.encode()).digest() if token else None

    def identity(self, token: str) -> Identity | None:
        """Support's identity when ``token`` is the Support token (compared in constant time)."""
        if self._digest is None:
            return None
        if hmac.compare_digest(hashlib.sha256(token.encode()).digest(), self._digest):
            return Identity(SUPPORT_IDENTITY, "Support")
        return None

    async def impersonated(self, who: Identity, request: Request) -> Identity:
        """The identity a request acts as: the caller, or for Support the one it impersonates."""
        headers = request.headers
        target = headers.get(IMPERSONATE_USER)
        others = [h for h in _IMPERSONATE_OTHER if h in headers] + [
            h for h in headers if h.startswith("impersonate-extra-")
        ]
        if target is None and not others:
            return who
        if who.role != "Support":
            raise Denied(f"{who.name} (role {who.role}) may not impersonate: only Support may")
        if others:
            raise Denied(
                f"impersonation by {', '.join(sorted(others))} is not supported: use Impersonate-User"
            )
        return replace(await self._account(target or ""), impersonator=who.name)

    async def _account(self, name: str) -> Identity:
        found = await tokens.account(self._store, name)
        if found is None:
            raise Denied(f"cannot impersonate {name!r}: no such ServiceAccount or User")
        return found
