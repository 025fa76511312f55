"""Signing a person in to herder from the command line, as kubelogin does for Kubernetes.

``sign_in`` asks herder how its people sign in (``GET /auth/oidc/config``: the issuer and the CLI's
client id), then signs in at the identity provider as a native client: through the browser, with a
loopback redirect ``http://127.0.0.1:<port>/callback`` and PKCE (RFC 8252), or with the device
authorization grant (RFC 8628), printing the verification URI and the user code. It hands the ID token to
herder, which answers with its own short-lived bearer token (a provider that wants a secret of that
native client all the same, as Google does, gets the one herder hands out with the client id). The
provider's refresh token and herder's token are kept in ``credentials_path()`` (``~/.config/herder/credentials``, mode 0600), one entry per
server.

``exec_credential`` is what kubeconfigs for people run (``herder auth exec-credential --server URL``, a
``client.authentication.k8s.io/v1`` exec plugin): herder's token while it lasts, else a new one for a
fresh ID token from the provider's refresh token, so that the file holds no token and the provider is
asked again, every time herder's token runs out, whether the person is still there. ``sign_out`` revokes
herder's token and the provider's refresh token, and forgets them.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import html
import json
import os
import secrets
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import yaml

from herder.client.config_home import config_dir

EXEC_API_VERSION = "client.authentication.k8s.io/v1"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
# herder's token is used while it lasts at least this much longer; else a new one is fetched.
MARGIN = timedelta(seconds=60)
SIGN_IN_TIMEOUT = 300.0
TIMEOUT = 30.0

Say = Callable[[str], None]


class SignInError(Exception):
    """A sign-in that cannot be done; the message says what to do."""


def credentials_path() -> Path:
    return config_dir() / "credentials"


@dataclass
class Login:
    """One server's sign-in, as the credentials file keeps it."""

    server: str
    issuer: str
    client_id: str
    token: str
    expires_at: str
    user: str = ""
    role: str = ""
    refresh_token: str = ""
    scopes: list[str] = field(default_factory=list)
    ca: str | None = None
    client_secret: str = ""
    provider_ca: str | None = None

    _FILE_KEYS = {
        "client_id": "clientId",
        "client_secret": "clientSecret",
        "expires_at": "expiresAt",
        "provider_ca": "providerCa",
        "refresh_token": "refreshToken",
    }

    def to_file(self) -> dict[str, Any]:
        return {self._FILE_KEYS.get(k, k): v for k, v in asdict(self).items()}

    @classmethod
    def from_file(cls, entry: dict[str, Any]) -> Login:
        names = {v: k for k, v in cls._FILE_KEYS.items()}
        return cls(
            **{names.get(k, k): v for k, v in entry.items() if names.get(k, k) in cls.__dataclass_fields__}
        )

    def valid_for(self, margin: timedelta) -> bool:
        try:
            at = datetime.fromisoformat(self.expires_at.replace("Z", "+00:00"))
        except ValueError:
            return False
        return at - datetime.now(UTC) > margin


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class CredentialsFile:
    """The credentials file: read and written under a lock, so that kubectl processes running at once
    refresh one token, not one each."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or credentials_path()

    @contextlib.contextmanager
    def locked(self) -> Iterator[dict[str, Login]]:
        """The file's logins, written back when the block ends without an error."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with (self.path.parent / f".{self.path.name}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            logins = self.read()
            before = json.dumps({k: v.to_file() for k, v in logins.items()}, sort_keys=True)
            yield logins
            after = json.dumps({k: v.to_file() for k, v in logins.items()}, sort_keys=True)
            if after != before:
                _write_private(self.path, json.dumps({"servers": json.loads(after)}, indent=2).encode())

    def read(self) -> dict[str, Login]:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise SignInError(f"cannot read {self.path}: {exc}") from None
        servers = doc.get("servers") if isinstance(doc, dict) else None
        logins = {}
        for server, entry in (servers or {}).items():
            with contextlib.suppress(TypeError):  # an entry this herder cannot use is no sign-in
                logins[server] = Login.from_file(entry)
        return logins


def _verify(ca: str | None) -> ssl.SSLContext | bool:
    return ssl.create_default_context(cadata=ca) if ca else True


def _herder(server: str, ca: str | None) -> httpx.Client:
    return httpx.Client(
        base_url=server, verify=_verify(ca), timeout=TIMEOUT, headers={"User-Agent": "herder-cli"}
    )


def _provider(ca: str | None) -> httpx.Client:
    """A client for the identity provider: trusting exactly ``ca`` (the private CA herder publishes, from
    its ``--oidc-ca-file``) when there is one, else the system's roots."""
    return httpx.Client(
        verify=_verify(ca),
        timeout=TIMEOUT,
        headers={"User-Agent": "herder-cli", "Accept": "application/json"},
    )


def _json(answer: httpx.Response, what: str) -> dict[str, Any]:
    try:
        body = answer.json()
    except ValueError:
        raise SignInError(f"{what} answered {answer.status_code} with no JSON: {answer.text[:200]}") from None
    if not isinstance(body, dict):
        raise SignInError(f"{what} answered {answer.status_code} with {body!r}")
    return body


def server_config(server: str, ca: str | None) -> dict[str, Any]:
    """How ``server``'s people sign in: its issuer, the CLI's client id, the scopes."""
    try:
        with _herder(server, ca) as http:
            answer = http.get("/auth/oidc/config")
    except httpx.HTTPError as exc:
        raise SignInError(f"cannot reach {server}: {exc or type(exc).__name__}") from None
    if answer.status_code == 404:
        raise SignInError(
            f"{server} has no single sign-on: its operator starts it with herder serve --oidc-issuer"
        )
    if answer.status_code != 200:
        raise SignInError(f"{server} answered {answer.status_code}: {answer.text[:200]}")
    return _json(answer, server)


def discover(issuer: str, ca: str | None) -> dict[str, Any]:
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        with _provider(ca) as http:
            answer = http.get(url)
    except httpx.HTTPError as exc:
        raise SignInError(
            f"cannot reach the identity provider {issuer}: {exc or type(exc).__name__}"
        ) from None
    doc = _json(answer, url)
    if doc.get("issuer") != issuer:
        raise SignInError(f"{url} names issuer {doc.get('issuer')!r}, not {issuer}")
    return doc


@dataclass(frozen=True)
class _Callback:
    query: dict[str, str]


def _loopback(state: str, timeout: float) -> tuple[HTTPServer, Callable[[], _Callback]]:
    """A server on a free loopback port answering ``/callback`` once; and a wait for its query."""
    got: list[_Callback] = []
    done = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            if parts.path != "/callback":
                self.send_error(404)
                return
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            if query.get("state") != state:
                self.send_error(400, "not this sign-in's answer")
                return
            failed = query.get("error")
            text = (
                f"Sign-in failed: {html.escape(query.get('error_description') or failed)}"
                if failed
                else "Signed in to herder: you may close this window."
            )
            body = f"<!doctype html><title>herder</title><p>{text}</p>".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            got.append(_Callback(query))
            done.set()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def wait() -> _Callback:
        try:
            if not done.wait(timeout):
                raise SignInError(f"no answer from the identity provider within {int(timeout)} s")
            return got[0]
        finally:
            server.shutdown()
            server.server_close()

    return server, wait


def _offline(config: dict[str, Any], provider: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The scopes to ask for, and any other parameter, so that the provider gives a refresh token:
    ``offline_access`` where the provider lists it (or lists no scopes), Google's ``access_type`` where not
    (with ``prompt=consent``: Google gives a refresh token only at a consent)."""
    scopes = list(config.get("scopes") or ["openid"])
    listed = provider.get("scopes_supported")
    if not isinstance(listed, list) or "offline_access" in listed:
        return " ".join([*scopes, "offline_access"]), {}
    return " ".join(scopes), {"access_type": "offline", "prompt": "consent"}


def _pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def _token_request(endpoint: str, form: dict[str, str], ca: str | None) -> tuple[int, dict[str, Any]]:
    try:
        with _provider(ca) as http:
            answer = http.post(endpoint, data=form)
    except httpx.HTTPError as exc:
        raise SignInError(
            f"cannot reach the identity provider's {endpoint}: {exc or type(exc).__name__}"
        ) from None
    return answer.status_code, _json(answer, endpoint)


def _client(client_id: str, secret: str | None) -> dict[str, str]:
    """How the CLI names itself to the provider: its client id, and the secret the provider wants of
    this native client, if any (``client_secret_post``: a secret everyone has gains nothing from Basic)."""
    return {"client_id": client_id, **({"client_secret": secret} if secret else {})}


def _config_client(config: dict[str, Any]) -> dict[str, str]:
    return _client(str(config["clientId"]), config.get("clientSecret"))


def _refused(body: dict[str, Any]) -> str:
    return str(body.get("error_description") or body.get("error") or body)


def browser_sign_in(
    config: dict[str, Any], provider: dict[str, Any], say: Say, *, open_browser: bool
) -> tuple[dict[str, Any], str]:
    """The provider's token response for a sign-in in the browser, and the nonce it carries."""
    state, nonce = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    verifier, challenge = _pkce()
    server, wait = _loopback(state, SIGN_IN_TIMEOUT)
    redirect = f"http://127.0.0.1:{server.server_address[1]}/callback"
    scopes, extra = _offline(config, provider)
    query = {
        "response_type": "code",
        "client_id": config["clientId"],
        "redirect_uri": redirect,
        "scope": scopes,
        "state": state,
        "nonce": nonce,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        **extra,
    }
    url = f"{provider['authorization_endpoint']}?{urlencode(query)}"
    say(f"Sign in to herder in your browser at:\n  {url}")
    if open_browser:
        import webbrowser

        with contextlib.suppress(Exception):
            webbrowser.open(url)
    answer = wait().query
    if answer.get("error"):
        raise SignInError(f"the identity provider did not sign you in: {_refused(answer)}")
    code, body = _token_request(
        provider["token_endpoint"],
        {
            "grant_type": "authorization_code",
            "code": answer.get("code", ""),
            "redirect_uri": redirect,
            "code_verifier": verifier,
            **_config_client(config),
        },
        config.get("providerCa"),
    )
    if code != 200 or "id_token" not in body:
        raise SignInError(f"the identity provider refused the sign-in: {_refused(body)}")
    return body, nonce


def device_sign_in(config: dict[str, Any], provider: dict[str, Any], say: Say) -> dict[str, Any]:
    """The provider's token response for a sign-in with the device authorization grant."""
    endpoint = provider.get("device_authorization_endpoint")
    if not endpoint:
        raise SignInError(
            f"the identity provider {provider.get('issuer')} offers no device sign-in: sign in without --device"
        )
    scopes, _ = _offline(config, provider)
    code, body = _token_request(
        endpoint, {"scope": scopes, **_config_client(config)}, config.get("providerCa")
    )
    if code != 200 or "device_code" not in body:
        raise SignInError(f"the identity provider refused a device sign-in: {_refused(body)}")
    lines = [f"To sign in, open {body['verification_uri']} and enter the code {body['user_code']}"]
    if body.get("verification_uri_complete"):
        lines.append(f"or open {body['verification_uri_complete']}")
    say("\n".join(lines))
    interval = float(body.get("interval") or 5)
    deadline = time.monotonic() + float(body.get("expires_in") or SIGN_IN_TIMEOUT)
    while time.monotonic() < deadline:
        time.sleep(interval)
        code, answer = _token_request(
            provider["token_endpoint"],
            {"grant_type": DEVICE_GRANT, "device_code": body["device_code"], **_config_client(config)},
            config.get("providerCa"),
        )
        if code == 200 and "id_token" in answer:
            return answer
        error = answer.get("error")
        if error == "authorization_pending":
            continue
        if error == "slow_down":
            interval += 5
            continue
        raise SignInError(f"the device sign-in ended: {_refused(answer)}")
    raise SignInError("the device sign-in expired before it was approved: run herder login --device again")


def exchange(
    server: str, ca: str | None, id_token: str, *, nonce: str | None = None, replaces: str | None = None
) -> dict[str, Any]:
    """herder's token for an ID token the provider gave (``replaces``: the token it had)."""
    body: dict[str, Any] = {"idToken": id_token}
    if nonce:
        body["nonce"] = nonce
    if replaces:
        body["replaces"] = replaces
    try:
        with _herder(server, ca) as http:
            answer = http.post("/auth/oidc/token", json=body)
    except httpx.HTTPError as exc:
        raise SignInError(f"cannot reach {server}: {exc or type(exc).__name__}") from None
    reply = _json(answer, server)
    if answer.status_code != 201:
        raise SignInError(
            f"{server} refused the sign-in ({answer.status_code}): {reply.get('message', reply)}"
        )
    return reply


def sign_in(
    server: str,
    ca: str | None,
    say: Say,
    *,
    device: bool = False,
    open_browser: bool = True,
    store: CredentialsFile | None = None,
) -> Login:
    """Sign in to ``server`` and keep the credential; the login kept."""
    config = server_config(server, ca)
    provider = discover(str(config["issuer"]), config.get("providerCa"))
    if device:
        answer, nonce = device_sign_in(config, provider, say), None
    else:
        answer, nonce = browser_sign_in(config, provider, say, open_browser=open_browser)
    granted = exchange(server, ca, str(answer["id_token"]), nonce=nonce)
    login = Login(
        server=server,
        issuer=str(config["issuer"]),
        client_id=str(config["clientId"]),
        token=str(granted["token"]),
        expires_at=str(granted["expirationTimestamp"]),
        user=str(granted.get("user", "")),
        role=str(granted.get("role", "")),
        refresh_token=str(answer.get("refresh_token") or ""),
        scopes=list(config.get("scopes") or []),
        ca=ca,
        client_secret=str(config.get("clientSecret") or ""),
        provider_ca=config.get("providerCa"),
    )
    with (store or CredentialsFile()).locked() as logins:
        old = logins.get(server)
        logins[server] = login
    if old is not None:
        with contextlib.suppress(SignInError):
            _revoke_at_herder(old)
    return login


def _refresh(login: Login) -> Login:
    if not login.refresh_token:
        raise SignInError(
            f"your sign-in to {login.server} has expired: run herder login --server {login.server}"
        )
    provider = discover(login.issuer, login.provider_ca)
    code, answer = _token_request(
        provider["token_endpoint"],
        {
            "grant_type": "refresh_token",
            "refresh_token": login.refresh_token,
            **_client(login.client_id, login.client_secret),
        },
        login.provider_ca,
    )
    if code != 200 or "id_token" not in answer:
        raise SignInError(
            f"the identity provider ended your sign-in to {login.server} ({_refused(answer)}): "
            f"run herder login --server {login.server}"
        )
    granted = exchange(login.server, login.ca, str(answer["id_token"]), replaces=login.token)
    login.token = str(granted["token"])
    login.expires_at = str(granted["expirationTimestamp"])
    login.user = str(granted.get("user", login.user))
    login.role = str(granted.get("role", login.role))
    login.refresh_token = str(answer.get("refresh_token") or login.refresh_token)
    return login


def token_for(server: str, store: CredentialsFile | None = None) -> Login:
    """A herder token for ``server`` that lasts a while yet (refreshed when it would not)."""
    with (store or CredentialsFile()).locked() as logins:
        login = logins.get(server.rstrip("/"))
        if login is None:
            raise SignInError(f"not signed in to {server}: run herder login --server {server}")
        if not login.valid_for(MARGIN):
            try:
                _refresh(login)
            except SignInError:
                # The refresh token is spent or refused: it is of no use any more.
                login.refresh_token = ""
                raise
        return login


def exec_credential(server: str, store: CredentialsFile | None = None) -> dict[str, Any]:
    """The ``ExecCredential`` kubectl asks an exec plugin for."""
    login = token_for(server, store)
    return {
        "apiVersion": EXEC_API_VERSION,
        "kind": "ExecCredential",
        "status": {"token": login.token, "expirationTimestamp": login.expires_at},
    }


def _revoke_at_herder(login: Login) -> None:
    try:
        with _herder(login.server, login.ca) as http:
            answer = http.post("/auth/revoke", headers={"Authorization": f"Bearer {login.token}"})
    except httpx.HTTPError as exc:
        raise SignInError(f"cannot reach {login.server}: {exc or type(exc).__name__}") from None
    if answer.status_code not in (200, 401):
        raise SignInError(f"{login.server} did not revoke the token ({answer.status_code})")


def sign_out(server: str, store: CredentialsFile | None = None) -> Login | None:
    """Revoke the sign-in to ``server`` (herder's token, the provider's refresh token) and forget it;
    the login it was, if there was one."""
    with (store or CredentialsFile()).locked() as logins:
        login = logins.pop(server.rstrip("/"), None)
    if login is None:
        return None
    _revoke_at_herder(login)
    if login.refresh_token:
        with contextlib.suppress(SignInError, KeyError):
            endpoint = discover(login.issuer, login.provider_ca).get("revocation_endpoint")
            if endpoint:
                _token_request(
                    str(endpoint),
                    {
                        "token": login.refresh_token,
                        "token_type_hint": "refresh_token",
                        **_client(login.client_id, login.client_secret),
                    },
                    login.provider_ca,
                )
    return login


def exec_user(server: str, command: str) -> dict[str, Any]:
    """A kubeconfig user that runs ``herder auth exec-credential`` for ``server``."""
    return {
        "exec": {
            "apiVersion": EXEC_API_VERSION,
            "command": command,
            "args": ["auth", "exec-credential", "--server", server],
            "interactiveMode": "Never",
            "provideClusterInfo": False,
        }
    }


def write_kubeconfig(
    path: Path, server: str, ca: str | None, command: str, user: str = "herder-user"
) -> None:
    """A kubeconfig (mode 0600) for herder's API at ``server`` whose user is the exec plugin: no token in it."""
    cluster: dict[str, Any] = {"server": server}
    if ca:
        cluster["certificate-authority-data"] = base64.b64encode(ca.encode()).decode()
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "herder", "cluster": cluster}],
        "users": [{"name": user, "user": exec_user(server, command)}],
        "contexts": [{"name": "herder", "context": {"cluster": "herder", "user": user}}],
        "current-context": "herder",
    }
    _write_private(path, yaml.safe_dump(doc, sort_keys=False).encode())
