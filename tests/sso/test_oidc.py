"""herder's relying party against a provider whose keys a test controls: a real HTTP server on loopback
serving a discovery document and a JWKS. Discovery refuses what cannot be used, with the flag and the
reason; the JWKS is read again for a key it lacks, no more than once every 30 s; the algorithm allow-list
refuses HMAC (even keyed with the provider's public key) and a key of another type; clock skew is 60 s;
and people are named by their verified email, else their sub."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import jwt
import pytest
import uvicorn
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from herder.api.oidc import IdentityProvider, OidcError, OidcSettings, TokenRefused
from herder.api.people import SignInRefused, groups_of, user_name

CLIENT = "herder-ui"


def _public(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    jwk: dict[str, Any] = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    return {**jwk, "kid": kid, "use": "sig", "alg": "RS256"}


@dataclass
class Issuer:
    url: str
    keys: dict[str, rsa.RSAPrivateKey]
    published: list[str]
    discovery: dict[str, Any] = field(default_factory=dict)
    jwks_reads: int = 0

    def token(self, kid: str = "a", alg: str = "RS256", **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": self.url, "aud": CLIENT, "sub": "ann", "iat": now, "exp": now + 300, **claims}
        return jwt.encode(body, self.keys[kid], algorithm=alg, headers={"kid": kid})

    def settings(self, **more: Any) -> OidcSettings:
        return OidcSettings(issuer=self.url, client_id=CLIENT, **more)


@pytest.fixture
async def issuer() -> AsyncIterator[Issuer]:
    # Bound and listening before the server runs: discovery can connect at once, and no other test takes
    # the port in between.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = int(sock.getsockname()[1])
    made = Issuer(
        f"http://127.0.0.1:{port}",
        {kid: rsa.generate_private_key(public_exponent=65537, key_size=2048) for kid in ("a", "b", "c")},
        ["a"],
    )
    made.discovery = {
        "issuer": made.url,
        "authorization_endpoint": f"{made.url}/auth",
        "token_endpoint": f"{made.url}/token",
        "jwks_uri": f"{made.url}/jwks",
        "id_token_signing_alg_values_supported": ["RS256", "ES256"],
    }

    async def discovery(request: Request) -> JSONResponse:
        return JSONResponse(made.discovery)

    async def jwks(request: Request) -> JSONResponse:
        made.jwks_reads += 1
        return JSONResponse({"keys": [_public(made.keys[k], k) for k in made.published]})

    app = Starlette(routes=[Route("/.well-known/openid-configuration", discovery), Route("/jwks", jwks)])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield made
    finally:
        server.should_exit = True
        await task
        sock.close()


@contextlib.asynccontextmanager
async def provider(issuer: Issuer, **settings: Any) -> AsyncIterator[IdentityProvider]:
    found = await IdentityProvider.discover(issuer.settings(**settings))
    try:
        yield found
    finally:
        await found.close()


async def test_discovery_refuses_what_it_cannot_use_naming_the_flag_and_why(issuer: Issuer) -> None:
    wrong = OidcSettings(issuer=issuer.url + "/", client_id=CLIENT)
    with pytest.raises(OidcError, match=r"--oidc-issuer .*names issuer .*mind the trailing slash"):
        await IdentityProvider.discover(wrong)
    with pytest.raises(OidcError, match="must be an https:// URL"):
        await IdentityProvider.discover(OidcSettings(issuer="http://idp.example.com", client_id=CLIENT))
    issuer.discovery["id_token_signing_alg_values_supported"] = ["HS256", "none"]
    with pytest.raises(OidcError, match="signs ID tokens only with HS256, none"):
        await IdentityProvider.discover(issuer.settings())
    issuer.discovery["id_token_signing_alg_values_supported"] = ["RS256"]
    del issuer.discovery["jwks_uri"]
    with pytest.raises(OidcError, match="has no jwks_uri"):
        await IdentityProvider.discover(issuer.settings())


async def test_a_key_the_jwks_lacked_is_read_again_but_at_most_every_30_seconds(issuer: Issuer) -> None:
    async with provider(issuer) as idp:
        assert issuer.jwks_reads == 1
        assert (await idp.verify(issuer.token("a"), audience=CLIENT, nonce=None))["sub"] == "ann"
        issuer.published = ["a", "b"]  # the provider rotates in key b
        idp.keys.read_at -= 31
        assert (await idp.verify(issuer.token("b"), audience=CLIENT, nonce=None))["sub"] == "ann"
        assert issuer.jwks_reads == 2
        # A flood of made-up key ids does not make herder hammer the provider.
        for _ in range(5):
            with pytest.raises(TokenRefused, match="'c', which is not among the provider's keys"):
                await idp.verify(issuer.token("c"), audience=CLIENT, nonce=None)
        assert issuer.jwks_reads == 2


async def test_only_asymmetric_algorithms_with_a_key_of_their_type_are_accepted(issuer: Issuer) -> None:
    public_pem = (
        issuer.keys["a"]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    now = int(time.time())
    claims = {"iss": issuer.url, "aud": CLIENT, "sub": "ann", "iat": now, "exp": now + 300}
    # HMAC keyed with the provider's public key: the classic confusion, refused before any key is used.
    signing_input = f"{_b64({'alg': 'HS256', 'kid': 'a'})}.{_b64(claims)}".encode()
    mac = hmac.new(public_pem, signing_input, hashlib.sha256).digest()
    confused = f"{signing_input.decode()}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"
    async with provider(issuer) as idp:
        with pytest.raises(TokenRefused, match="'HS256' is not accepted"):
            await idp.verify(confused, audience=CLIENT, nonce=None)
        # ES256 is accepted, but key a is an RSA key (for RS256).
        forged = jwt.encode(claims, _ec_key(), algorithm="ES256", headers={"kid": "a"})
        with pytest.raises(TokenRefused, match="which is for RS256"):
            await idp.verify(forged, audience=CLIENT, nonce=None)


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def _ec_key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


async def test_clock_skew_is_sixty_seconds_and_every_claim_is_checked(issuer: Issuer) -> None:
    now = int(time.time())
    async with provider(issuer) as idp:
        await idp.verify(issuer.token(iat=now + 30, exp=now + 330), audience=CLIENT, nonce=None)
        await idp.verify(issuer.token(exp=now - 30), audience=CLIENT, nonce=None)
        for token, reason in (
            (issuer.token(iat=now + 120, exp=now + 400), "issued in the future"),
            (issuer.token(exp=now - 120), "expired"),
            (issuer.token(aud=[CLIENT, "other"], azp="other"), "authorized party"),
            (issuer.token(nonce="theirs"), "nonce"),
            (issuer.token(sub=None), "sub"),
        ):
            with pytest.raises(TokenRefused, match=reason):
                await idp.verify(token, audience=CLIENT, nonce="mine" if reason == "nonce" else None)


def test_people_are_named_by_their_verified_email_else_their_sub() -> None:
    assert (
        user_name({"sub": "1", "email": "Ann@Example.com", "email_verified": True}, False)
        == "ann@example.com"
    )
    assert (
        user_name({"sub": "1", "email": "ann@example.com", "email_verified": "true"}, False)
        == "ann@example.com"
    )
    assert user_name({"sub": "1", "email": "ann@example.com"}, False) == "1"
    assert user_name({"sub": "1", "email": "ann@example.com"}, True) == "ann@example.com"
    # A sub that could pass for an email, or holds what a name may not, is hashed: no person can take
    # another's name by choosing their sub.
    assert user_name({"sub": "ann@example.com"}, False).startswith("sub-")
    assert user_name({"sub": "f:0c1d:ann"}, False).startswith("sub-")
    with pytest.raises(SignInRefused):
        user_name({}, False)
    assert groups_of({"groups": ["b", "a", "a", 7]}, "groups") == ["7", "a", "b"]
    assert groups_of({"roles": "admin"}, "roles") == ["admin"]
    assert groups_of({}, "groups") == []
