"""Signing in with a herder token (a ServiceAccount's or a User's, as kubectl uses it) and signing out.

The token is checked by the API's own policy, so a revoked, expired or unknown token is refused as the
API refuses it, and failed attempts count towards the same limit per source address.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from herder.krm.policy import Unauthenticated
from herder.krm.status import ApiError
from herder.web.app import SECURITY_HEADERS, Web
from herder.web.caller import authenticate
from herder.web.csrf import LOGIN_COOKIE, FormRefused, check, new_token, read_form
from herder.web.sessions import SESSION_COOKIE, drop_cookie, set_cookie


def routes(web: Web) -> list[BaseRoute]:
    def login_form(request: Request, status: int = 200, error: str = "") -> Response:
        token = new_token()
        response = web.render(request, "login.html", {"csrf": token, "error": error}, status=status)
        set_cookie(response, request, LOGIN_COOKIE, token)
        return response

    async def show(request: Request) -> Response:
        return login_form(request)

    async def login(request: Request) -> Response:
        try:
            form = await read_form(request)
            check(form, request.cookies.get(LOGIN_COOKIE))
        except FormRefused as exc:
            return web.failure(request, exc.code, str(exc))
        token = (form.get("token") or [""])[0].strip()
        if not token:
            return login_form(request, 400, "token: a herder token is required")
        try:
            await authenticate(web.policy, token, request)
        except Unauthenticated:
            return login_form(request, 401, "token: this token is not valid (unknown, revoked or expired)")
        except ApiError as exc:  # too many failed attempts from this address
            return login_form(request, exc.code, exc.message)
        web.sessions.close(request)  # a session the browser had before ends: a new id for the new sign-in
        session_id, _ = web.sessions.open(token)
        base = request.scope.get("root_path", "")
        response = RedirectResponse(f"{base}/clusters", 303, headers=SECURITY_HEADERS)
        set_cookie(response, request, SESSION_COOKIE, session_id)
        drop_cookie(response, request, LOGIN_COOKIE)
        return response

    async def logout(request: Request) -> Response:
        session = web.sessions.of(request)
        try:
            check(await read_form(request), session.csrf if session else None)
        except FormRefused as exc:
            return web.failure(request, exc.code, str(exc))
        web.sessions.close(request)
        response = web.to_login(request)
        drop_cookie(response, request, SESSION_COOKIE)
        return response

    return [
        Route("/login", show, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
    ]
