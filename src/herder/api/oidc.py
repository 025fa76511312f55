"""herder as a relying party of one OpenID Connect provider: its discovery, its signing keys, and the
strict verification of the ID tokens it issues.

``IdentityProvider.discover`` runs when ``herder serve`` starts: it reads the provider's discovery
document (``ISSUER/.well-known/openid-configuration``), checks that it names the configured issuer
exactly, and reads its JWKS, so that a wrong issuer, an unreachable provider or a bad CA ends the start
with a message saying which, not the first sign-in. A token signed with a key the JWKS did not hold
makes it read the JWKS again, at most once every ``JWKS_REFRESH_EVERY`` seconds (a flood of tokens with
made-up key ids cannot make herder hammer the provider).

ID tokens are verified with PyJWT: the signature with an allow-list of asymmetric algorithms (never
``none``, never HMAC, whose key would be the public one), the key's type and algorithm matching the
token's, ``iss`` exactly, ``aud`` holding the client (and ``azp`` naming it when present), ``exp``, ``nbf``
and ``iat`` with ``SKEW`` seconds of clock skew, ``sub``, and the ``nonce`` the sign-in sent. Every refusal
says which check failed (``TokenRefused``), for the audit trail.

The web UI signs in with the authorization code flow and PKCE (S256) as a confidential client (with
``--oidc-client-secret-file``) or a public one; the CLI signs in on its own as a native client, and
hands herder the ID token it got (``herder.api.people``). A native client is public: a provider that
still wants a secret from one (Google's desktop clients) gets ``--oidc-cli-client-secret``, which herder
hands to every CLI, since no copy of a program its users run can keep a secret.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import ipaddress
import logging
import secrets
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import httpx
import jwt

log = logging.getLogger("herder.oidc")

# Asymmetric algorithms only: with HMAC the verifying key would be the client secret or, worse, a public key.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
SKEW = 60
"""Seconds of clock skew allowed between herder and the provider on exp, nbf and iat."""
JWKS_REFRESH_EVERY = 30.0
"""A token naming an unknown key reads the JWKS again, but no more often than this (seconds)."""
TIMEOUT = 10.0
DEFAULT_SCOPES = ("openid", "email", "profile", "groups")
UI_CALLBACK = "/ui/auth/oidc/callback"


class OidcError(ValueError):
    """The provider cannot be used as configured: the message names the flag or the provider's fault."""


class TokenRefused(Exception):
    """An ID token (or a provider's answer) that fails verification; the message says which check."""


@dataclass(frozen=True)
class OidcSettings:
    """``herder serve --oidc-…``."""

    issuer: str
    client_id: str
    client_secret: str | None = field(default=None, repr=False)
    cli_client_id: str | None = None
    cli_client_secret: str | None = field(default=None, repr=False)
    scopes: tuple[str, ...] = DEFAULT_SCOPES
    groups_claim: str = "groups"
    default_role: str = "None"
    allow_unverified_email: bool = False
    ca_file: Path | None = None
    provider_name: str = ""

    @property
    def cli_id(self) -> str:
        """The client id of the CLI (a native client): ``--oidc-cli-client-id``, else the UI's."""
        return self.cli_client_id or self.client_id

    @property
    def name(self) -> str:
        """What the sign-in button calls the provider: ``--oidc-provider-name``, else its host."""
        return self.provider_name or (urlsplit(self.issuer).hostname or self.issuer)


def loopback(host: str | None) -> bool:
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False


def check_url(url: str, what: str) -> None:
    """Refuse anything but https, and http on a loopback address (tests, demos) with a warning."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and loopback(parts.hostname):
        log.warning(
            "%s %s is plain http: accepted on a loopback address only, for tests and demos", what, url
        )
        return
    raise OidcError(
        f"{what} {url}: must be an https:// URL (http:// is accepted on a loopback address only, "
        "for tests and demos)"
    )


def read_client_secret(path: Path) -> str:
    """The client secret held in ``path`` (``--oidc-client-secret-file``)."""
    try:
        secret = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise OidcError(f"--oidc-client-secret-file {path}: {exc.strerror or exc}") from None
    if not secret or any(c.isspace() for c in secret):
        raise OidcError(f"--oidc-client-secret-file {path}: expected one secret on one line")
    return secret


@dataclass(frozen=True)
class Discovery:
    """What herder uses of the provider's discovery document."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    end_session_endpoint: str | None = None
    revocation_endpoint: str | None = None
    device_authorization_endpoint: str | None = None
    algorithms: tuple[str, ...] = ("RS256",)
    token_auth_methods: tuple[str, ...] = ("client_secret_basic",)

    @classmethod
    def parse(cls, doc: Any, issuer: str) -> Discovery:
        if not isinstance(doc, dict):
            raise OidcError(f"--oidc-issuer {issuer}: its discovery document is not a JSON object")
        named = doc.get("issuer")
        if named != issuer:
            hint = (
                " (mind the trailing slash)"
                if isinstance(named, str) and named.rstrip("/") == issuer.rstrip("/")
                else ""
            )
            raise OidcError(
                f"--oidc-issuer {issuer}: the provider's discovery document names issuer {named!r}{hint}: "
                "give --oidc-issuer exactly as the provider names itself"
            )
        missing = [k for k in ("authorization_endpoint", "token_endpoint", "jwks_uri") if not doc.get(k)]
        if missing:
            raise OidcError(f"--oidc-issuer {issuer}: its discovery document has no {', '.join(missing)}")
        for key in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            check_url(str(doc[key]), f"the provider's {key}")
        offered = tuple(
            a for a in doc.get("id_token_signing_alg_values_supported") or ["RS256"] if a in ALGORITHMS
        )
        if not offered:
            raise OidcError(
                f"--oidc-issuer {issuer}: the provider signs ID tokens only with "
                f"{', '.join(doc.get('id_token_signing_alg_values_supported') or [])}; herder accepts "
                f"{', '.join(ALGORITHMS)}"
            )
        return cls(
            issuer=issuer,
            authorization_endpoint=str(doc["authorization_endpoint"]),
            token_endpoint=str(doc["token_endpoint"]),
            jwks_uri=str(doc["jwks_uri"]),
            end_session_endpoint=doc.get("end_session_endpoint") or None,
            revocation_endpoint=doc.get("revocation_endpoint") or None,
            device_authorization_endpoint=doc.get("device_authorization_endpoint") or None,
            algorithms=offered,
            token_auth_methods=tuple(
                doc.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
            ),
        )


@dataclass
class Keys:
    """The provider's signing keys by key id, read again when a token names one it lacks."""

    url: str
    http: httpx.AsyncClient
    by_id: dict[str, dict[str, Any]] = field(default_factory=dict)
    read_at: float = 0.0
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def read(self) -> None:
        try:
            answer = await self.http.get(self.url)
            answer.raise_for_status()
            doc = answer.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise OidcError(
                f"cannot read the provider's JWKS {self.url}: {exc or type(exc).__name__}"
            ) from None
        keys = doc.get("keys") if isinstance(doc, dict) else None
        if not isinstance(keys, list):
            raise OidcError(f"the provider's JWKS {self.url} holds no keys")
        signing = [k for k in keys if isinstance(k, dict) and k.get("use", "sig") == "sig" and k.get("kty")]
        self.by_id = {str(k.get("kid", "")): k for k in signing}
        self.read_at = time.monotonic()

    async def find(self, kid: str | None) -> dict[str, Any]:
        """The key ``kid`` names (a token without one: the only key there is)."""
        found = self._lookup(kid)
        if found is None:
            async with self._lock:
                found = self._lookup(kid)
                if found is None and time.monotonic() - self.read_at >= JWKS_REFRESH_EVERY:
                    try:
                        await self.read()
                    except OidcError as exc:
                        raise TokenRefused(str(exc)) from None
                    found = self._lookup(kid)
        if found is None:
            raise TokenRefused(
                f"signed with key {kid!r}, which is not among the provider's keys"
                if kid
                else "the token names no key (kid) and the provider has several"
            )
        return found

    def _lookup(self, kid: str | None) -> dict[str, Any] | None:
        if kid:
            return self.by_id.get(kid)
        return next(iter(self.by_id.values())) if len(self.by_id) == 1 else None


@dataclass(frozen=True)
class Pending:
    """One sign-in under way: what the provider's answer must match."""

    state: str
    nonce: str
    verifier: str
    redirect_uri: str

    @classmethod
    def new(cls, redirect_uri: str) -> Pending:
        return cls(
            secrets.token_urlsafe(32), secrets.token_urlsafe(32), secrets.token_urlsafe(48), redirect_uri
        )

    @property
    def challenge(self) -> str:
        """The PKCE S256 challenge of the verifier."""
        digest = hashlib.sha256(self.verifier.encode()).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def to_dict(self) -> dict[str, str]:
        return {
            "state": self.state,
            "nonce": self.nonce,
            "verifier": self.verifier,
            "redirectUri": self.redirect_uri,
        }

    @classmethod
    def from_dict(cls, data: dict[str, str]) -> Pending:
        return cls(data["state"], data["nonce"], data["verifier"], data["redirectUri"])


def http_client(ca_file: Path | None) -> httpx.AsyncClient:
    """A client for the provider's endpoints, trusting ``ca_file`` (``--oidc-ca-file``) or the system's roots."""
    verify: ssl.SSLContext | bool = True
    if ca_file is not None:
        try:
            verify = ssl.create_default_context(cafile=str(ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise OidcError(f"--oidc-ca-file {ca_file}: {getattr(exc, 'strerror', None) or exc}") from None
    return httpx.AsyncClient(verify=verify, timeout=TIMEOUT, headers={"User-Agent": "herder"})


class IdentityProvider:
    """The provider as configured and discovered."""

    def __init__(
        self,
        settings: OidcSettings,
        discovery: Discovery,
        keys: Keys,
        http: httpx.AsyncClient,
        ca_pem: str | None = None,
    ) -> None:
        self.settings = settings
        self.discovery = discovery
        self.keys = keys
        self._http = http
        # The provider's private CA (``--oidc-ca-file``), published to the CLI with the sign-in config.
        self.ca_pem = ca_pem

    @classmethod
    async def discover(cls, settings: OidcSettings) -> IdentityProvider:
        check_url(settings.issuer, "--oidc-issuer")
        http = http_client(settings.ca_file)
        try:
            url = settings.issuer.rstrip("/") + "/.well-known/openid-configuration"
            try:
                answer = await http.get(url)
                answer.raise_for_status()
                doc = answer.json()
            except httpx.HTTPStatusError as exc:
                raise OidcError(
                    f"--oidc-issuer {settings.issuer}: {url} answered {exc.response.status_code}: is this "
                    "an OpenID Provider's issuer URL?"
                ) from None
            except (httpx.HTTPError, ValueError) as exc:
                raise OidcError(
                    f"--oidc-issuer {settings.issuer}: cannot read {url}: {exc or type(exc).__name__}"
                ) from None
            discovery = Discovery.parse(doc, settings.issuer)
            keys = Keys(discovery.jwks_uri, http)
            await keys.read()
            if not keys.by_id:
                raise OidcError(
                    f"--oidc-issuer {settings.issuer}: its JWKS {discovery.jwks_uri} holds no signing key"
                )
        except BaseException:
            await http.aclose()
            raise
        log.info("signing people in with %s (client %s)", settings.issuer, settings.client_id)
        ca_pem = settings.ca_file.read_text(encoding="utf-8") if settings.ca_file is not None else None
        return cls(settings, discovery, keys, http, ca_pem)

    async def close(self) -> None:
        await self._http.aclose()

    async def verify(self, token: str, *, audience: str, nonce: str | None) -> dict[str, Any]:
        """The claims of a valid ID token for ``audience``; ``nonce``: the one the sign-in sent (None
        when the flow has none, as the device grant). ``TokenRefused`` names the failed check."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError as exc:
            raise TokenRefused(f"not a signed JWT: {exc}") from None
        alg = header.get("alg")
        allowed = self.discovery.algorithms
        if alg not in allowed:
            raise TokenRefused(
                f"signature algorithm {alg!r} is not accepted (accepted: {', '.join(allowed)})"
            )
        jwk = await self.keys.find(header.get("kid"))
        if jwk.get("alg") not in (None, alg):
            raise TokenRefused(
                f"signed with {alg} by key {header.get('kid')!r}, which is for {jwk.get('alg')}"
            )
        try:
            key = jwt.PyJWK(jwk, algorithm=alg)
        except (jwt.PyJWKError, jwt.InvalidKeyError) as exc:
            raise TokenRefused(
                f"the provider's key {header.get('kid')!r} does not fit {alg}: {exc}"
            ) from None
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key=key,
                algorithms=[alg],
                audience=audience,
                issuer=self.discovery.issuer,
                leeway=SKEW,
                options={"require": ["iss", "sub", "aud", "exp", "iat"]},
            )
        except jwt.InvalidSignatureError:
            raise TokenRefused("its signature does not verify with the provider's key") from None
        except jwt.ExpiredSignatureError:
            raise TokenRefused(f"expired (more than {SKEW} s ago)") from None
        except jwt.ImmatureSignatureError as exc:
            raise TokenRefused(f"issued in the future (more than {SKEW} s ahead): {exc}") from None
        except jwt.InvalidIssuerError:
            raise TokenRefused(
                f"issued by {_unverified(token, 'iss')!r}, not by {self.discovery.issuer}"
            ) from None
        except jwt.InvalidAudienceError:
            raise TokenRefused(
                f"issued to {_unverified(token, 'aud')!r}, not to client {audience!r}"
            ) from None
        except jwt.MissingRequiredClaimError as exc:
            raise TokenRefused(f"it has no {exc.claim} claim") from None
        except jwt.InvalidTokenError as exc:
            raise TokenRefused(str(exc) or type(exc).__name__) from None
        azp = claims.get("azp")
        if azp is not None and azp != audience:
            raise TokenRefused(f"authorized party (azp) {azp!r} is not client {audience!r}")
        if nonce is not None:
            given = claims.get("nonce")
            if not isinstance(given, str) or not secrets.compare_digest(given, nonce):
                raise TokenRefused("its nonce is not the one this sign-in sent (a replayed or foreign token)")
        return claims

    def authorization_url(self, pending: Pending, *, client_id: str) -> str:
        query = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": pending.redirect_uri,
            "scope": " ".join(self.settings.scopes),
            "state": pending.state,
            "nonce": pending.nonce,
            "code_challenge": pending.challenge,
            "code_challenge_method": "S256",
        }
        return f"{self.discovery.authorization_endpoint}?{urlencode(query)}"

    async def redeem(self, code: str, pending: Pending) -> dict[str, Any]:
        """The token response for the web UI's authorization code (its client authenticating with its
        secret, the way the provider says it takes it)."""
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": pending.redirect_uri,
            "code_verifier": pending.verifier,
        }
        headers = {"Accept": "application/json"}
        settings = self.settings
        if settings.client_secret is None:
            form["client_id"] = settings.client_id
        elif "client_secret_basic" in self.discovery.token_auth_methods:
            pair = f"{quote(settings.client_id, safe='')}:{quote(settings.client_secret, safe='')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        else:
            form |= {"client_id": settings.client_id, "client_secret": settings.client_secret}
        try:
            answer = await self._http.post(self.discovery.token_endpoint, data=form, headers=headers)
            body = answer.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise TokenRefused(f"the provider's token endpoint failed: {exc or type(exc).__name__}") from None
        if answer.status_code != 200 or not isinstance(body, dict):
            error = body.get("error_description") or body.get("error") if isinstance(body, dict) else None
            raise TokenRefused(
                f"the provider refused the code ({answer.status_code}): {error or answer.text[:200]}"
            )
        if not isinstance(body.get("id_token"), str):
            raise TokenRefused(
                "the provider's token response holds no ID token (is the openid scope allowed?)"
            )
        return body

    def end_session_url(self, id_token: str, post_logout_redirect_uri: str) -> str | None:
        """Where the browser signs out at the provider too, when it has an end_session_endpoint."""
        endpoint = self.discovery.end_session_endpoint
        if not endpoint:
            return None
        query = {"client_id": self.settings.client_id, "post_logout_redirect_uri": post_logout_redirect_uri}
        if id_token:
            query["id_token_hint"] = id_token
        return f"{endpoint}{'&' if '?' in endpoint else '?'}{urlencode(query)}"


def _unverified(token: str, claim: str) -> Any:
    """A claim of a token that failed verification, to say what it claimed (never trusted)."""
    try:
        return jwt.decode(token, options={"verify_signature": False}).get(claim)
    except jwt.InvalidTokenError:
        return None
