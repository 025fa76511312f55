"""Who may use the emulated BMCs: one account (``--bmc-user``, ``--bmc-password``), by HTTP basic
authentication or a session's ``X-Auth-Token`` (kept as a digest; a session ends after ``SESSION_TIMEOUT``
unused, and at most ``MAX_SESSIONS`` are kept, as a BMC's are few)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from herder.emu.bmc.http import RedfishError

SESSION_TIMEOUT = 1800
"""Seconds a session lasts unused (the SessionService's SessionTimeout)."""
MAX_SESSIONS = 64
"""Sessions kept at most: the oldest goes when one more logs in."""
REALM = 'Basic realm="herder emulator BMC", charset="UTF-8"'


def unauthenticated(
    message: str = "There is no valid session established with the implementation.",
) -> RedfishError:
    return RedfishError(401, "NoValidSession", message, {"WWW-Authenticate": REALM})


@dataclass
class Session:
    id: str
    user: str
    token_digest: bytes
    last_used: float


class Sessions:
    def __init__(self, username: str, password: str) -> None:
        self.username = username
        self._password = password
        self._sessions: dict[str, Session] = {}

    def ids(self) -> list[str]:
        return list(self._sessions)

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def authenticate(self, headers: dict[str, str]) -> str | None:
        """The user a request authenticates as (a session's token, or basic), or None."""
        token = headers.get("x-auth-token")
        if token:
            now = time.monotonic()
            for gone in [s.id for s in self._sessions.values() if now - s.last_used > SESSION_TIMEOUT]:
                del self._sessions[gone]
            digest = hashlib.sha256(token.encode()).digest()
            for session in self._sessions.values():
                if hmac.compare_digest(session.token_digest, digest):
                    session.last_used = now
                    return session.user
            return None
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            user, _, password = base64.b64decode(credentials, validate=True).decode().partition(":")
        except ValueError:
            return None
        return user if self._valid(user, password) else None

    def _valid(self, user: str, password: str) -> bool:
        return hmac.compare_digest(user.encode(), self.username.encode()) & hmac.compare_digest(
            password.encode(), self._password.encode()
        )

    def log_in(self, user: object, password: object) -> tuple[Session, str]:
        """A new session of the account, and its token (shown once)."""
        if not isinstance(user, str) or not isinstance(password, str):
            raise RedfishError(400, "ActionParameterMissing", "UserName and Password are required to log in.")
        if not self._valid(user, password):
            raise unauthenticated("The credentials given are not valid.")
        token = secrets.token_hex(32)
        while len(self._sessions) >= MAX_SESSIONS:
            del self._sessions[next(iter(self._sessions))]
        session = Session(
            secrets.token_hex(8), user, hashlib.sha256(token.encode()).digest(), time.monotonic()
        )
        self._sessions[session.id] = session
        return session, token

    def log_out(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)
