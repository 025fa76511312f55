"""The web UI's sessions, kept in the state store: any replica serves them, and a restart keeps people
signed in.

A session is a ``WebSession`` named by the SHA-256 of its id (the id lives only in the browser's cookie),
holding the herder token the UI calls the API with (the kind is sealed at rest and no role reads it
through the API), the CSRF token of its forms, the messages the next page shows, and for a sign-in
through the identity provider its ID token (to sign out there too). It ends on sign-out, after ``idle``
without a request, at ``max_age`` after it began whatever its use, or when its token stops
authenticating (revoked, expired, its account disabled or deleted: the UI authenticates it again on
every request). A session is owned by its token's ``Token`` object, so revoking the token or deleting
the account lets the garbage collector take it too.

A sign-in through the identity provider in progress is a session of its own with ``pending`` set (its
state, nonce and PKCE verifier), taken once by the provider's callback within ``PENDING_TTL``.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from herder.resources import Resource
from herder.resources.access import TOKEN, WEB_SESSION
from herder.state.errors import AlreadyExists, Conflict, NotFound
from herder.state.store import SYSTEM, Store

IDLE = timedelta(hours=8)
MAX_AGE = timedelta(hours=24)
PENDING_TTL = timedelta(minutes=10)
# A session's last use is written at most this often: not a store write per page.
TOUCH_EVERY = timedelta(seconds=60)
# Ended sessions left behind (a browser that never came back) are swept at most this often.
SWEEP_EVERY = 300.0


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def key_of(session_id: str) -> str:
    """The name of a session's object: nothing stored can be presented as the session."""
    return hashlib.sha256(session_id.encode()).hexdigest()


@dataclass
class Session:
    key: str
    token: str = field(repr=False)
    csrf: str
    created_at: datetime
    used_at: datetime
    expires_at: datetime
    id_token: str = field(default="", repr=False)
    messages: list[str] = field(default_factory=list)
    resource_version: str | None = None
    dirty: bool = False

    def flash(self, message: str) -> None:
        """Show ``message`` once, on the next page."""
        self.messages.append(message)
        self.dirty = True

    def flashes(self) -> list[str]:
        shown, self.messages = self.messages, []
        self.dirty = self.dirty or bool(shown)
        return shown

    def spec(self) -> dict[str, Any]:
        return {
            "token": self.token,
            "csrf": self.csrf,
            "createdAt": _stamp(self.created_at),
            "usedAt": _stamp(self.used_at),
            "expiresAt": _stamp(self.expires_at),
            "idToken": self.id_token,
            "messages": self.messages,
        }

    @classmethod
    def of(cls, obj: Resource) -> Session:
        spec = obj.spec or {}
        return cls(
            key=obj.name,
            token=str(spec.get("token", "")),
            csrf=str(spec.get("csrf", "")),
            created_at=_parse(spec["createdAt"]),
            used_at=_parse(spec["usedAt"]),
            expires_at=_parse(spec["expiresAt"]),
            id_token=str(spec.get("idToken", "")),
            messages=list(spec.get("messages") or []),
            resource_version=obj.metadata.resource_version,
        )


def _token_name(token: str) -> str | None:
    prefix, _, rest = token.partition("_")
    name = rest.rpartition("_")[0]
    return name if prefix == "hdr" and name else None


class Sessions:
    def __init__(
        self,
        store: Store,
        *,
        idle: timedelta = IDLE,
        max_age: timedelta = MAX_AGE,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._store = store
        self.idle = idle
        self.max_age = max_age
        self._now = now
        self._swept = 0.0

    def _object(self, key: str, spec: dict[str, Any], owner: Resource | None = None) -> Resource:
        meta: dict[str, Any] = {"name": key}
        if owner is not None:
            meta["ownerReferences"] = [
                {
                    "apiVersion": owner.api_version,
                    "kind": owner.kind,
                    "name": owner.name,
                    "uid": owner.metadata.uid,
                }
            ]
        return Resource.model_validate(
            {"apiVersion": WEB_SESSION.api_version, "kind": WEB_SESSION.kind, "metadata": meta, "spec": spec}
        )

    async def open(self, token: str, *, id_token: str = "") -> tuple[str, Session]:
        """A new session acting with ``token``: its id (for the cookie) and the session."""
        await self.sweep()
        owner = None
        name = _token_name(token)
        if name is not None:
            with contextlib.suppress(NotFound):
                owner = await self._store.get(TOKEN, name)
        now = self._now()
        while True:
            session_id = secrets.token_urlsafe(32)
            session = Session(
                key_of(session_id),
                token,
                secrets.token_urlsafe(32),
                now,
                now,
                now + self.max_age,
                id_token=id_token,
            )
            with contextlib.suppress(AlreadyExists):
                stored = await self._store.create(
                    self._object(session.key, session.spec(), owner), actor=SYSTEM
                )
                session.resource_version = stored.metadata.resource_version
                return session_id, session

    def _ended(self, spec: dict[str, Any], now: datetime) -> bool:
        if spec.get("pending") is not None:
            return now - _parse(spec["createdAt"]) > PENDING_TTL
        return now >= _parse(spec["expiresAt"]) or now - _parse(spec["usedAt"]) > self.idle

    async def get(self, session_id: str | None) -> Session | None:
        """The live session ``session_id`` names, if any (an ended one is deleted); its use is noted."""
        found = await self._stored(session_id)
        if found is None:
            return None
        key, obj = found
        spec = obj.spec or {}
        now = self._now()
        if spec.get("pending") is not None:
            return None
        if self._ended(spec, now):
            await self._delete(key)
            return None
        session = Session.of(obj)
        if now - session.used_at >= TOUCH_EVERY:
            session.used_at = now
            session.dirty = True
        return session

    async def save(self, session: Session) -> None:
        """Write what changed of ``session`` (its messages, its last use); a session ended meanwhile
        stays ended."""
        if not session.dirty:
            return
        try:
            obj = await self._store.get(WEB_SESSION, session.key)
        except NotFound:
            return
        updated = obj.model_copy(update={"spec": {**(obj.spec or {}), **session.spec()}})
        with contextlib.suppress(NotFound, Conflict):
            stored = await self._store.update(updated, actor=SYSTEM)
            session.resource_version = stored.metadata.resource_version
            session.dirty = False

    async def close(self, session_id: str | None) -> Session | None:
        """End the session ``session_id`` names (and the token issued for it, at a sign-in through the
        identity provider); the session it was, if it was one."""
        found = await self._stored(session_id)
        if found is None:
            return None
        key, obj = found
        await self._delete(key)
        spec = obj.spec or {}
        if spec.get("pending") is not None:
            return None
        session = Session.of(obj)
        name = _token_name(session.token)
        if session.id_token and name is not None:
            # The token was issued for this session at its sign-in through the provider: it ends with it.
            with contextlib.suppress(NotFound):
                await self._store.delete(TOKEN, name, actor=SYSTEM)
        return session

    async def begin(self, pending: dict[str, str]) -> str:
        """Keep a sign-in under way; the id its callback presents."""
        await self.sweep()
        now = self._now()
        session_id = secrets.token_urlsafe(32)
        spec = {
            "createdAt": _stamp(now),
            "usedAt": _stamp(now),
            "expiresAt": _stamp(now + PENDING_TTL),
            "pending": pending,
        }
        await self._store.create(self._object(key_of(session_id), spec), actor=SYSTEM)
        return session_id

    async def take_pending(self, session_id: str | None) -> dict[str, str] | None:
        """The sign-in under way ``session_id`` names, taken once; None when there is none or it is stale."""
        found = await self._stored(session_id)
        if found is None:
            return None
        key, obj = found
        spec = obj.spec or {}
        if spec.get("pending") is None:
            return None
        try:
            await self._store.delete(
                WEB_SESSION, key, actor=SYSTEM, resource_version=obj.metadata.resource_version
            )
        except (NotFound, Conflict):
            return None  # taken by another request at the same moment: once only
        return None if self._ended(spec, self._now()) else dict(spec["pending"])

    async def sweep(self) -> int:
        """Delete the sessions that ended (at most once every ``SWEEP_EVERY`` seconds); how many went."""
        if time.monotonic() - self._swept < SWEEP_EVERY and self._swept:
            return 0
        self._swept = time.monotonic()
        now = self._now()
        gone = 0
        for obj in (await self._store.list(WEB_SESSION)).items:
            if self._ended(obj.spec or {}, now):
                await self._delete(obj.name)
                gone += 1
        return gone

    async def _stored(self, session_id: str | None) -> tuple[str, Resource] | None:
        """The stored key and object of the session ``session_id`` names; None when there is none."""
        if not session_id:
            return None
        key = key_of(session_id)
        try:
            return key, await self._store.get(WEB_SESSION, key)
        except NotFound:
            return None

    async def _delete(self, key: str) -> None:
        with contextlib.suppress(NotFound):
            await self._store.delete(WEB_SESSION, key, actor=SYSTEM)
