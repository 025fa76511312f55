"""Browser sessions: a random session id in an HttpOnly, Secure, SameSite=Strict cookie, and the herder
token it stands for kept in this process's memory only.

The UI calls the API as the user, so it must hold the user's token for as long as the session lasts;
it never leaves the server (no cookie, no page, no log line carries it). Sessions are keyed by the
SHA-256 of their id, so that the table holds nothing a browser could present. They end on logout, after
``IDLE`` without a request, or when the token stops authenticating (revoked, expired, its account
deleted): every request authenticates it again through the API's policy. A restart of the server ends
every session (log in again), as does a request reaching another replica.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import Response

SESSION_COOKIE = "herder_session"
# Sessions unused this long end.
IDLE = 8 * 3600.0
# The most sessions kept at once: the oldest beyond it end (a flood of logins cannot exhaust memory).
MAX_SESSIONS = 10_000


@dataclass
class Session:
    token: str = field(repr=False)
    # The CSRF token every form of this session carries (see ``herder.web.csrf``).
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    used: float = field(default_factory=time.monotonic)
    # What the next page shows once: the outcome of the form just sent.
    messages: list[str] = field(default_factory=list)

    def flash(self, message: str) -> None:
        self.messages.append(message)

    def flashes(self) -> list[str]:
        shown, self.messages = self.messages, []
        return shown


def _key(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class Sessions:
    def __init__(self, idle: float = IDLE, limit: int = MAX_SESSIONS) -> None:
        self._idle = idle
        self._limit = limit
        self._sessions: dict[str, Session] = {}

    def open(self, token: str) -> tuple[str, Session]:
        """A new session for ``token``: its id (for the cookie) and the session."""
        while len(self._sessions) >= self._limit:
            self._sessions.pop(next(iter(self._sessions)))
        session_id = secrets.token_urlsafe(32)
        session = Session(token)
        self._sessions[_key(session_id)] = session
        return session_id, session

    def of(self, request: Request) -> Session | None:
        """The live session the request's cookie names, if any."""
        session_id = request.cookies.get(SESSION_COOKIE)
        if not session_id:
            return None
        key = _key(session_id)
        session = self._sessions.get(key)
        now = time.monotonic()
        if session is None or now - session.used > self._idle:
            self._sessions.pop(key, None)
            return None
        session.used = now
        # Most recently used last: the limit ends the least recently used first.
        self._sessions[key] = self._sessions.pop(key)
        return session

    def close(self, request: Request) -> None:
        session_id = request.cookies.get(SESSION_COOKIE)
        if session_id:
            self._sessions.pop(_key(session_id), None)


def set_cookie(response: Response, request: Request, name: str, value: str) -> None:
    """A cookie only the UI's own pages get, and no script reads."""
    response.set_cookie(
        name,
        value,
        path=request.scope.get("root_path") or "/",
        httponly=True,
        secure=True,
        samesite="strict",
    )


def drop_cookie(response: Response, request: Request, name: str) -> None:
    response.delete_cookie(
        name, path=request.scope.get("root_path") or "/", httponly=True, secure=True, samesite="strict"
    )
