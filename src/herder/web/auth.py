"""Signing in with a herder token (a ServiceAccount's or a User's, as kubectl uses it) and signing out.

The token is checked by the API's own policy, so a revoked, expired or unknown token is refused as the
API refuses it, and failed attempts count towards the same limit per source address. With single
sign-on configured the sign-in page also offers "Sign in with <provider>" (``herder.web.sso``); signing
out of such a session signs out at the provider too, when it has an ``end_session_endpoint``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from herder.krm.policy import Unauthenticated
from herder.krm.status import ApiError
from herder.web.caller import authenticate
from herder.web.csrf import LOGIN_COOKIE, FormRefused, check, new_token, read_form
from herder.web.sessions import SESSION_COOKIE, drop_cookie, session_id, set_cookie
from herder.web.site import SECURITY_HEADERS, Web, origin


def login_page(web: Web, request: Request, status: int = 200, error: str = "") -> Response:
    """The sign-in page: the token form, and the provider's button when there is one."""
    token = new_token()
    provider = web.people.provider.settings.name if web.people is not None else ""
    response = web.render(
        request, "login.html", {"csrf": token, "error": error, "provider": provider}, status=status
    )
    set_cookie(response, request, LOGIN_COOKIE, token)
    return response


def routes(web: Web) -> list[BaseRoute]:
    async def show(request: Request) -> Response:
        return login_page(web, request)

    async def login(request: Request) -> Response:
        try:
            form = await read_form(request)
            check(form, request.cookies.get(LOGIN_COOKIE))
        except FormRefused as exc:
            return web.failure(request, exc.code, str(exc))
        token = (form.get("token") or [""])[0].strip()
        if not token:
            return login_page(web, request, 400, "token: a herder token is required")
        try:
            await authenticate(web.policy, token, request)
        except Unauthenticated:
            return login_page(
                web, request, 401, "token: this token is not valid (unknown, revoked or expired)"
            )
        except ApiError as exc:  # too many failed attempts from this address
            return login_page(web, request, exc.code, exc.message)
        # A session the browser had before ends: a new id for the new sign-in.
        await web.sessions.close(session_id(request))
        new_id, _ = await web.sessions.open(token)
        base = request.scope.get("root_path", "")
        response = RedirectResponse(f"{base}/clusters", 303, headers=SECURITY_HEADERS)
        set_cookie(response, request, SESSION_COOKIE, new_id)
        drop_cookie(response, request, LOGIN_COOKIE)
        return response

    async def logout(request: Request) -> Response:
        session = await web.sessions.get(session_id(request))
        try:
            check(await read_form(request), session.csrf if session else None)
        except FormRefused as exc:
            return web.failure(request, exc.code, str(exc))
        closed = await web.sessions.close(session_id(request))
        response: Response = web.to_login(request)
        if closed is not None and closed.id_token and web.people is not None:
            base = request.scope.get("root_path", "")
            there = web.people.provider.end_session_url(closed.id_token, f"{origin(request)}{base}/login")
            if there is not None:
                # A page that moves on by itself: a form's redirect to another site would break the
                # pages' form-action policy.
                response = web.render(
                    request,
                    "signed_out.html",
                    {"next": there, "provider": web.people.provider.settings.name},
                )
        drop_cookie(response, request, SESSION_COOKIE)
        return response

    return [
        Route("/login", show, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
    ]
