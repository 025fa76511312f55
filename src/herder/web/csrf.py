"""Forms and their CSRF check: every POST carries the session's CSRF token in the field ``csrf``, or is
refused with 403 before anything is done.

The session cookie is SameSite=Strict already; the token is the second lock, for browsers or setups
where that is not enough. The login form, before any session exists, carries a token that must match a
short-lived cookie set with the form (a double submit), so that no other site can log a browser in.
"""

from __future__ import annotations

import hmac
import secrets
from urllib.parse import parse_qsl

from starlette.requests import Request

FIELD = "csrf"
LOGIN_COOKIE = "herder_login"
# Forms are a few fields: a bigger body is refused before it is parsed.
MAX_FORM_BYTES = 64 * 1024


class FormRefused(Exception):
    """A POST refused before it is acted on; ``code`` is the HTTP status to answer."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


Form = dict[str, list[str]]


async def read_form(request: Request) -> Form:
    """The URL-encoded fields of a POST, each name with its values in order."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip()
    if kind not in ("application/x-www-form-urlencoded", ""):
        raise FormRefused(415, f"forms are sent as application/x-www-form-urlencoded, not {kind}")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise FormRefused(413, f"a form may be at most {MAX_FORM_BYTES} bytes")
    form: Form = {}
    try:
        pairs = parse_qsl(body.decode(), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise FormRefused(400, "the form is not UTF-8") from None
    for name, value in pairs:
        form.setdefault(name, []).append(value)
    return form


def check(form: Form, expected: str | None) -> None:
    """Refuse (403) a form whose CSRF token is missing or not ``expected``."""
    given = (form.get(FIELD) or [""])[0]
    if not expected or not given or not hmac.compare_digest(given.encode(), expected.encode()):
        raise FormRefused(403, "the form's CSRF token is missing or wrong: reload the page and try again")


def new_token() -> str:
    return secrets.token_urlsafe(32)
