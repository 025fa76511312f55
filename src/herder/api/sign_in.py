"""The API's sign-in endpoints for people, beside the Kubernetes-style ones (``herder login`` uses them):

- ``GET /auth/oidc/config``: what a client needs to sign in (no credential needed): the issuer, the CLI's
  client id (and the secret a provider wants of that native client, ``--oidc-cli-client-secret``, which
  is no secret), the scopes, the provider's name, and the provider's private CA (``providerCa``, the PEM
  of ``--oidc-ca-file``, which the CLI then trusts for the provider, and nothing else) when it has one.
- ``POST /auth/oidc/token`` with ``{"idToken", "nonce"?, "replaces"?}``: an ID token the CLI got from the
  provider (for ``--oidc-cli-client-id``) for a herder token of ``ACCESS_TOKEN_TTL``; ``replaces`` names
  the herder token it had, which is revoked. A refused token is answered 401 saying which check failed,
  counts towards the source's limit of failed authentications, and is written to the audit trail.
- ``POST /auth/revoke`` with the bearer token to revoke (expired or not): ``herder logout``.

A request with no single sign-on configured gets 404 on the ``oidc`` paths.
"""

from __future__ import annotations

import contextlib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from herder.api import tokens
from herder.api.oidc import TokenRefused
from herder.api.people import ACCESS_TOKEN_TTL, SignInRefused
from herder.api.policy import HerderPolicy
from herder.krm import media
from herder.krm.policy import Access, Identity, Unauthenticated
from herder.krm.status import ApiError, api_error
from herder.resources.access import TOKEN
from herder.state.store import Store

CONFIG_PATH = "/auth/oidc/config"
TOKEN_PATH = "/auth/oidc/token"
REVOKE_PATH = "/auth/revoke"
MAX_BODY = 64 * 1024


class TokenExchange(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    id_token: str = Field(alias="idToken", min_length=1, max_length=32 * 1024)
    nonce: str | None = Field(default=None, max_length=512)
    replaces: str | None = Field(default=None, max_length=1024)


def _json(body: dict[str, Any], status: int = 200) -> Response:
    return Response(media.dumps(body), status, media_type=media.JSON, headers={"Cache-Control": "no-store"})


def routes(store: Store, policy: HerderPolicy) -> list[BaseRoute]:
    sign_in_access = Access("create", TOKEN)

    async def config(request: Request) -> Response:
        people = policy.people
        if people is None:
            return ApiError(404, "this herder has no single sign-on (herder serve --oidc-issuer)").response()
        settings = people.provider.settings
        return _json(
            {
                "issuer": people.provider.discovery.issuer,
                "clientId": settings.cli_id,
                "scopes": list(settings.scopes),
                "providerName": settings.name,
                **({"clientSecret": settings.cli_client_secret} if settings.cli_client_secret else {}),
                **({"providerCa": people.provider.ca_pem} if people.provider.ca_pem else {}),
            }
        )

    async def exchange(request: Request) -> Response:
        people = policy.people
        if people is None:
            return ApiError(404, "this herder has no single sign-on (herder serve --oidc-issuer)").response()
        who: Identity | None = None
        try:
            raw = await media.read_body(request, MAX_BODY)
            try:
                asked = TokenExchange.model_validate(
                    media.parse_object(raw, media.JSON) if raw.strip() else {}
                )
            except ValidationError as err:
                first = err.errors()[0]
                field = ".".join(str(p) for p in first["loc"])
                raise ApiError(400, f"{field}: {first['msg']}") from None
            try:
                claims = await people.provider.verify(
                    asked.id_token, audience=people.provider.settings.cli_id, nonce=asked.nonce
                )
                signed = await people.sign_in(claims, expires_in=ACCESS_TOKEN_TTL, description="herder login")
            except TokenRefused as exc:
                policy.failed(request)
                raise ApiError(401, f"ID token refused: {exc}") from None
            except SignInRefused as exc:
                policy.failed(request)
                raise ApiError(403, f"sign-in refused: {exc}") from None
            who = signed.who
            if asked.replaces:
                # Not this person's, or gone already: nothing to replace.
                with contextlib.suppress(Unauthenticated):
                    await tokens.revoke(store, asked.replaces, subject_uid=signed.user.metadata.uid)
        except Exception as exc:
            error = api_error(exc)
            await policy.record(None, sign_in_access, request, error.code, error.message)
            return error.response()
        access = Access("create", TOKEN, None, signed.token.name)
        await policy.record(
            who, access, request, 201, "signed in through the identity provider (herder login)"
        )
        return _json(
            {
                "token": signed.token.token,
                "expirationTimestamp": signed.token.expires_at,
                "user": signed.who.name,
                "role": signed.who.role,
            },
            201,
        )

    async def revoke(request: Request) -> Response:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        try:
            if scheme.lower() != "bearer" or not token.strip():
                raise Unauthenticated("a bearer token is required: the token to revoke")
            try:
                record = await tokens.revoke(store, token.strip())
            except Unauthenticated:
                policy.failed(request)
                raise
        except Exception as exc:
            error = api_error(exc)
            await policy.record(None, Access("delete", TOKEN), request, error.code, error.message)
            return error.response()
        spec = record.spec or {}
        who = await tokens.account(
            store, tokens.identity_name(str(spec.get("subjectKind")), str(spec.get("subject")))
        )
        await policy.record(
            who, Access("delete", TOKEN, None, record.name), request, 200, "signed out (herder logout)"
        )
        return _json({"revoked": record.name})

    return [
        Route(CONFIG_PATH, config, methods=["GET"]),
        Route(TOKEN_PATH, exchange, methods=["POST"]),
        Route(REVOKE_PATH, revoke, methods=["POST"]),
    ]
