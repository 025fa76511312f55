"""Join tokens: made at random by ``herder jointoken create``, shown once, kept as a digest in a JoinToken;
checked when a machine calls Provision (revoked, expired and unknown tokens refused alike).

A token reads ``hjt_<name>_<secret>`` (URL-safe: it travels in ``siderolink.api``'s query). As with bearer
tokens (``herder.api.tokens``), a fast digest of a 256-bit random secret is enough. An infra provider's
``JoinConfig.token`` lets its machines join too, for as long as the provider exists.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from herder.resources.join import JOIN_TOKEN, JOIN_TOKEN_PREFIX, JoinTokenSpec
from herder.resources.provisioning import JOIN_CONFIG, JoinConfigSpec
from herder.state.errors import NotFound
from herder.state.store import Store


class Refused(Exception):
    """A token that lets no machine join, with why (told to the audit log, not to the caller)."""


@dataclass(frozen=True)
class MadeToken:
    token: str
    digest: str


@dataclass(frozen=True)
class Admitted:
    by: str
    """What let the machine in: a JoinToken's name, or ``provider/ID``."""
    join_token: str = ""
    """The JoinToken's name ('' for a provider's token)."""
    provider: str = ""
    rejoined: bool = False
    """Let in by its own rejoin token (``herder.talos.siderolink.rejoin``), having joined before."""


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def make(name: str) -> MadeToken:
    secret = secrets.token_hex(32)
    return MadeToken(f"{JOIN_TOKEN_PREFIX}_{name}_{secret}", digest(secret))


def parse(token: str) -> tuple[str, str] | None:
    """(name, secret) of a join token, or None when it is not one."""
    prefix, _, rest = token.partition("_")
    name, _, secret = rest.rpartition("_")
    if prefix != JOIN_TOKEN_PREFIX or not name or len(secret) != 64:
        return None
    return name, secret


def expired(spec: JoinTokenSpec, now: datetime) -> bool:
    if spec.expires_at is None:
        return False
    return datetime.strptime(spec.expires_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) <= now


async def admit(store: Store, token: str, now: datetime | None = None) -> Admitted:
    """What lets a machine with ``token`` join; ``Refused`` saying why when nothing does."""
    if not token:
        raise Refused("no join token")
    parsed = parse(token)
    if parsed is None:
        for config in (await store.list(JOIN_CONFIG)).items:
            given = JOIN_CONFIG.spec_of(config, JoinConfigSpec).token
            if hmac.compare_digest(given.encode(), token.encode()):
                return Admitted(f"provider/{config.name}", provider=config.name)
        raise Refused("not a join token herder issued")
    name, secret = parsed
    try:
        found = await store.get(JOIN_TOKEN, name)
    except NotFound:
        raise Refused(f"join token {name} does not exist") from None
    spec = JOIN_TOKEN.spec_of(found, JoinTokenSpec)
    if not hmac.compare_digest(spec.digest, digest(secret)):
        raise Refused(f"join token {name}: wrong secret")
    if spec.revoked:
        raise Refused(f"join token {name} is revoked")
    if expired(spec, now or datetime.now(UTC)):
        raise Refused(f"join token {name} expired at {spec.expires_at}")
    return Admitted(name, join_token=name)
