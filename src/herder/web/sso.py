"""Signing in through the identity provider: the authorization code flow with PKCE (S256).

``GET /ui/auth/oidc/login`` keeps a sign-in under way in the store (its ``state``, ``nonce`` and PKCE
verifier, and the exact redirect URI, ``https://HOST:PORT/ui/auth/oidc/callback`` as the browser reached
the UI) behind a short-lived cookie, and sends the browser to the provider. The provider sends it back to
``/ui/auth/oidc/callback`` with a code: the sign-in under way is taken (once), the ``state`` must be its
own, the code is redeemed for tokens with the verifier, and the ID token must pass every check of
``herder.api.oidc`` with the sign-in's nonce. The person is then signed in (``herder.api.people``: their
User made or brought up to date, RoleRules applied) with a herder token that ends with the session. Every
sign-in, and every refusal with the check that failed, is written to the audit trail.
"""

from __future__ import annotations

import secrets

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from herder.api.oidc import Pending, TokenRefused
from herder.api.people import SignInRefused
from herder.krm.policy import Access
from herder.krm.status import ApiError
from herder.resources.access import TOKEN
from herder.web.auth import login_page
from herder.web.sessions import (
    SESSION_COOKIE,
    SIGN_IN_COOKIE,
    SIGN_IN_PATH,
    drop_sign_in_cookie,
    session_id,
    set_cookie,
    set_sign_in_cookie,
)
from herder.web.site import SECURITY_HEADERS, Web, origin

_SIGN_IN = Access("create", TOKEN)


def routes(web: Web) -> list[BaseRoute]:
    if web.people is None:
        return []
    people = web.people

    async def start(request: Request) -> Response:
        base = request.scope.get("root_path", "")
        pending = Pending.new(f"{origin(request)}{base}{SIGN_IN_PATH}/callback")
        sign_in_id = await web.sessions.begin(pending.to_dict())
        there = people.provider.authorization_url(pending, client_id=people.provider.settings.client_id)
        response = RedirectResponse(there, 303, headers=SECURITY_HEADERS)
        set_sign_in_cookie(response, request, sign_in_id)
        return response

    async def refused(request: Request, code: int, message: str) -> Response:
        await web.policy.record(None, _SIGN_IN, request, code, message)
        response = login_page(web, request, code, message)
        drop_sign_in_cookie(response, request)
        return response

    async def callback(request: Request) -> Response:
        taken = await web.sessions.take_pending(request.cookies.get(SIGN_IN_COOKIE))
        if taken is None:
            return await refused(
                request, 400, "this sign-in expired or began in another browser: sign in again"
            )
        pending = Pending.from_dict(taken)
        query = request.query_params
        if query.get("error"):
            reason = query.get("error_description") or query["error"]
            return await refused(request, 401, f"the identity provider did not sign you in: {reason}")
        if not secrets.compare_digest(query.get("state", ""), pending.state):
            return await refused(request, 400, "sign-in refused: the answer's state is not this sign-in's")
        code = query.get("code", "")
        if not code:
            return await refused(request, 400, "sign-in refused: the identity provider sent no code")
        try:
            try:
                answer = await people.provider.redeem(code, pending)
                id_token = str(answer["id_token"])
                claims = await people.provider.verify(
                    id_token, audience=people.provider.settings.client_id, nonce=pending.nonce
                )
                signed = await people.sign_in(
                    claims, expires_in=web.sessions.max_age, description="web UI session"
                )
            except TokenRefused as exc:
                web.policy.failed(request)
                return await refused(request, 401, f"sign-in refused: ID token refused: {exc}")
            except SignInRefused as exc:
                web.policy.failed(request)
                return await refused(request, 403, f"sign-in refused: {exc}")
        except ApiError as exc:  # too many failed sign-ins from this address
            return login_page(web, request, exc.code, exc.message)
        await web.sessions.close(session_id(request))
        new_id, _ = await web.sessions.open(signed.token.token, id_token=id_token)
        access = Access("create", TOKEN, None, signed.token.name)
        await web.policy.record(
            signed.who, access, request, 201, "signed in through the identity provider (web UI)"
        )
        base = request.scope.get("root_path", "")
        # A page that moves on by itself, not a redirect: the browser came from the provider's site, and
        # would not send the new SameSite=Strict session cookie along a redirect from there.
        response = web.render(
            request, "signed_in.html", {"next": f"{base}/clusters", "user": signed.who.name}
        )
        set_cookie(response, request, SESSION_COOKIE, new_id)
        drop_sign_in_cookie(response, request)
        return response

    return [
        Route(f"{SIGN_IN_PATH}/login", start, methods=["GET"]),
        Route(f"{SIGN_IN_PATH}/callback", callback, methods=["GET"]),
    ]
