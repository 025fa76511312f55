"""What every page of the web UI shares: the API it calls as the signed-in user, the API's policy, the
sessions, the templates, and the ways a page renders, refuses, fails and redirects (``Web``).

Pages (``herder.web.pages``), sign-in (``auth``, ``sso``) and live updates (``live``) are built on it;
``herder.web.app`` puts them together.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp

from herder.api.policy import HerderPolicy
from herder.client.errors import ApiError, Invalid, TransportError, Unauthorized
from herder.krm.policy import Identity, Unauthenticated
from herder.krm.status import ApiError as Refused
from herder.web import views
from herder.web.caller import Caller, authenticate
from herder.web.csrf import FIELD, Form, FormRefused, check, read_form
from herder.web.sessions import Session, session_id

# Asked by the live-update script: render only the page's live region, not the whole page.
LIVE_HEADER = "x-herder-live"
LIVE_BLOCK = "live"

# What every answer of the UI says to the browser: no framing, no inline script, nothing cached.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}

PageHandler = Callable[[Request, Caller], Awaitable[Response]]
FormHandler = Callable[[Request, Caller, Form], Awaitable[Response]]


def origin(request: Request) -> str:
    """``https://HOST:PORT`` as the browser reached herder (its UI and API share the address)."""
    return f"https://{request.headers.get('host') or request.url.netloc}"


class Web:
    """What every page shares: the API it calls, the API's policy, the sessions and the templates, and the
    CA of herder's serving certificate (None: a public one)."""

    def __init__(self, api: ASGIApp, policy: HerderPolicy, ca_pem: bytes | None) -> None:
        self.api = api
        self.policy = policy
        self.ca_pem = ca_pem
        self.sessions = policy.sessions
        self.people = policy.people
        self.templates = Environment(
            loader=PackageLoader("herder.web", "templates"),
            autoescape=select_autoescape(default=True),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.globals.update(views.GLOBALS)
        self.templates.filters.update(views.FILTERS)
        # The macros are a global, not an import in each page: a page's live block renders alone.
        self.templates.globals["ui"] = self.templates.get_template("_macros.html").make_module()

    def render(
        self,
        request: Request,
        template: str,
        context: dict[str, Any],
        *,
        caller: Caller | None = None,
        status: int = 200,
    ) -> Response:
        """The page, or only its live region when the live-update script asks for it."""
        page = self.templates.get_template(template)
        session: Session | None = getattr(request.state, "session", None)
        values = {
            "base": request.scope.get("root_path", ""),
            "path": request.url.path,
            "caller": caller,
            "csrf": session.csrf if session is not None else context.get("csrf", ""),
            "csrf_field": FIELD,
            "flash": session.flashes()
            if session is not None and not request.headers.get(LIVE_HEADER)
            else [],
            "watch": [],
            "rv": "",
            **context,
        }
        if request.headers.get(LIVE_HEADER) and LIVE_BLOCK in page.blocks:
            body = "".join(page.blocks[LIVE_BLOCK](page.new_context(values)))
        else:
            body = page.render(values)
        return HTMLResponse(body, status, headers=SECURITY_HEADERS)

    def failure(
        self,
        request: Request,
        code: int,
        message: str,
        *,
        caller: Caller | None = None,
        causes: Sequence[Any] = (),
    ) -> Response:
        return self.render(
            request,
            "error.html",
            {"code": code, "message": message, "causes": causes},
            caller=caller,
            status=code,
        )

    def refusal(
        self, request: Request, caller: Caller, verb: str, kind: str, obj: Any = None
    ) -> Response | None:
        """The page refusing a form for something the API would refuse ``caller`` (its 403 and reason),
        or None when it is allowed: a form that can only fail is not shown."""
        why = caller.why_not(verb, kind, obj)
        return self.failure(request, 403, why, caller=caller) if why else None

    def to_login(self, request: Request) -> Response:
        base = request.scope.get("root_path", "")
        return RedirectResponse(f"{base}/login", 303, headers=SECURITY_HEADERS)

    async def caller_of(self, request: Request) -> tuple[Session, Caller] | None:
        """The request's session and its user, authenticated again by the API's policy; None when
        there is no session or its token no longer authenticates (the session then ends)."""
        found = await self.signed_in(request)
        if found is None:
            return None
        session, who = found
        return session, Caller.of(who, session.token, request, self.api, self.policy)

    async def signed_in(self, request: Request) -> tuple[Session, Identity] | None:
        """The request's session and who its token authenticates; None (and the session ends) when
        there is none or the token no longer authenticates."""
        session = await self.sessions.get(session_id(request))
        if session is None:
            return None
        try:
            who = await authenticate(self.policy, session.token, request)
        except (Unauthenticated, Refused):
            await self.sessions.close(session_id(request))
            return None
        return session, who

    def page(self, handler: PageHandler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            signed_in = await self.caller_of(request)
            if signed_in is None:
                return self.to_login(request)
            session, caller = signed_in
            request.state.session = session
            async with caller.client:
                try:
                    return await handler(request, caller)
                except Unauthorized:
                    await self.sessions.close(session_id(request))
                    return self.to_login(request)
                except Invalid as exc:
                    return self.failure(request, exc.code, exc.message, caller=caller, causes=exc.causes)
                except ApiError as exc:
                    return self.failure(request, exc.code, exc.message, caller=caller)
                except (TransportError, views.BadInput) as exc:
                    return self.failure(request, 400, str(exc), caller=caller)
                finally:
                    # The messages it showed or left for the next page, its last use.
                    await self.sessions.save(session)

        return endpoint

    def form(self, handler: FormHandler) -> Callable[[Request], Awaitable[Response]]:
        """A POST endpoint: refused (403) without the session's CSRF token, before anything is done."""

        async def with_form(request: Request, caller: Caller) -> Response:
            try:
                form = await read_form(request)
                check(form, request.state.session.csrf)
            except FormRefused as exc:
                return self.failure(request, exc.code, str(exc), caller=caller)
            return await handler(request, caller, form)

        page = self.page(with_form)

        async def endpoint(request: Request) -> Response:
            if await self.sessions.get(session_id(request)) is None:
                # No session: no CSRF token could be right; refused as any CSRF-less POST is.
                return self.failure(request, 403, "not signed in: a form needs a session and its CSRF token")
            return await page(request)

        return endpoint

    def done(self, request: Request, where: str, message: str) -> Response:
        """After a form: back to ``where`` (under the UI's base), saying what was done."""
        request.state.session.flash(message)
        base = request.scope.get("root_path", "")
        return RedirectResponse(f"{base}{where}", 303, headers=SECURITY_HEADERS)
