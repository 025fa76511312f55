"""The browser's half of a session: a random session id in an HttpOnly, Secure, SameSite=Strict cookie.

The session itself (the herder token the UI acts with, its CSRF token, its messages) is kept in the state
store by ``herder.api.sessions``, so any replica serves it and a restart keeps people signed in; the
token never leaves the server (no cookie, no page, no log line carries it). A sign-in through the
identity provider in progress has its own cookie, SameSite=Lax because the provider sends the browser
back from another site, scoped to the callback's path and gone after ten minutes.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from herder.api.sessions import PENDING_TTL, Session

SESSION_COOKIE = "herder_session"
SIGN_IN_COOKIE = "herder_sign_in"
SIGN_IN_PATH = "/auth/oidc"

__all__ = ["SESSION_COOKIE", "SIGN_IN_COOKIE", "Session", "drop_cookie", "session_id", "set_cookie"]


def session_id(request: Request) -> str | None:
    return request.cookies.get(SESSION_COOKIE) or None


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


def set_sign_in_cookie(response: Response, request: Request, value: str) -> None:
    """The cookie of a sign-in under way, sent back by the browser to the provider's callback only."""
    response.set_cookie(
        SIGN_IN_COOKIE,
        value,
        max_age=int(PENDING_TTL.total_seconds()),
        path=(request.scope.get("root_path") or "") + SIGN_IN_PATH,
        httponly=True,
        secure=True,
        samesite="lax",
    )


def drop_sign_in_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(
        SIGN_IN_COOKIE,
        path=(request.scope.get("root_path") or "") + SIGN_IN_PATH,
        httponly=True,
        secure=True,
        samesite="lax",
    )


def drop_cookie(response: Response, request: Request, name: str) -> None:
    response.delete_cookie(
        name, path=request.scope.get("root_path") or "/", httponly=True, secure=True, samesite="strict"
    )
