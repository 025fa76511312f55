"""Bearer tokens: issued at random, shown once, stored only as a digest; expiry and revocation.

A token reads ``hdr_<name>_<secret>``: ``name`` is its ``Token`` object (whose, until when) and
``secret`` is 32 random bytes in hex. The store keeps SHA-256 of the secret in a ``TokenDigest`` of
the same name. A fast hash is enough here: slow, salted password hashes exist to make guessing a
low-entropy human password expensive, but a 256-bit random secret cannot be guessed however cheap
each try is, and a fast digest keeps authenticating every request cheap. Deleting the ``Token`` (or
its subject) revokes it; a Token is bound to its subject's uid, so an account deleted and made again
under the same name does not inherit the old tokens.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from herder.krm.policy import Identity, Unauthenticated
from herder.resources import KindInfo, OwnerReference, Resource
from herder.resources.access import (
    INFRA_PROVIDER_LABEL,
    SERVICE_ACCOUNT,
    TOKEN,
    TOKEN_DIGEST,
    TOKEN_SUBJECT_LABEL,
    USER,
    IdentitySpec,
    UserSpec,
)
from herder.state.errors import AlreadyExists, NotFound
from herder.state.store import SYSTEM, Store

PREFIX = "hdr"
# The kinds a token may stand for, with the model of their spec.
SUBJECT_KINDS: dict[str, tuple[KindInfo, type[IdentitySpec]]] = {
    SERVICE_ACCOUNT.kind: (SERVICE_ACCOUNT, IdentitySpec),
    USER.kind: (USER, UserSpec),
}


@dataclass(frozen=True)
class IssuedToken:
    """A token as handed out once; ``token`` is the only copy of the secret that will ever exist."""

    name: str
    token: str
    expires_at: str | None


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _expiry(expires_in: timedelta) -> str:
    """When a token given now expires, in whole seconds rounded up: never sooner than asked."""
    at = datetime.now(UTC) + expires_in
    if at.microsecond:
        at = at.replace(microsecond=0) + timedelta(seconds=1)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def identity_name(kind: str, name: str) -> str:
    """How an identity is named in audit events and to the store: ``serviceaccount:ci``."""
    return f"{kind.lower()}:{name}"


async def account(store: Store, name: str) -> Identity | None:
    """The ServiceAccount or User called ``name`` (``serviceaccount:NAME`` and ``user:NAME`` too), as an
    identity; None when there is none."""
    prefix, _, bare = name.partition(":")
    kinds = {"serviceaccount": (SERVICE_ACCOUNT,), "user": (USER,)}.get(prefix.lower()) if bare else None
    for kind in kinds or (SERVICE_ACCOUNT, USER):
        try:
            subject = await store.get(kind, bare if kinds else name)
        except NotFound:
            continue
        _, model = SUBJECT_KINDS[kind.kind]
        spec = kind.spec_of(subject, model)
        scope = {INFRA_PROVIDER_LABEL: spec.provider_id} if spec.provider_id else {}
        return Identity(
            identity_name(kind.kind, subject.name), spec.role, scope, labels=subject.metadata.labels
        )
    return None


async def issue(
    store: Store,
    subject_kind: KindInfo,
    subject: str,
    *,
    expires_in: timedelta | None = None,
    description: str = "",
) -> IssuedToken:
    """Make a new token for an existing ServiceAccount or User (``NotFound`` when there is none)."""
    owner = await store.get(subject_kind, subject)
    expires_at = _expiry(expires_in) if expires_in is not None else None
    for _ in range(5):
        name = f"{subject[:200]}-{secrets.token_hex(4)}"
        secret = secrets.token_hex(32)
        token = Resource.model_validate(
            {
                "apiVersion": TOKEN.api_version,
                "kind": TOKEN.kind,
                "metadata": {
                    "name": name,
                    "labels": {TOKEN_SUBJECT_LABEL: subject} if len(subject) <= 63 else {},
                    "ownerReferences": [_owner_ref(owner)],
                },
                "spec": {
                    "subjectKind": subject_kind.kind,
                    "subject": subject,
                    "expiresAt": expires_at,
                    "description": description,
                },
            }
        )
        try:
            created = await store.create(token, actor=SYSTEM)
        except AlreadyExists:
            continue
        sealed = Resource.model_validate(
            {
                "apiVersion": TOKEN_DIGEST.api_version,
                "kind": TOKEN_DIGEST.kind,
                "metadata": {"name": name, "ownerReferences": [_owner_ref(created)]},
                "spec": {"sha256": digest(secret)},
            }
        )
        await store.create(sealed, actor=SYSTEM)
        return IssuedToken(name, f"{PREFIX}_{name}_{secret}", expires_at)
    raise RuntimeError("could not find a free token name")


def _owner_ref(owner: Resource) -> OwnerReference:
    return OwnerReference(
        apiVersion=owner.api_version, kind=owner.kind, name=owner.name, uid=owner.metadata.uid or ""
    )


async def authenticate(store: Store, token: str) -> Identity:
    """The identity a presented token stands for; ``Unauthenticated`` for anything else.

    The messages never repeat the token, and do not tell a revoked token from one never issued.
    """
    prefix, _, rest = token.partition("_")
    name, _, secret = rest.rpartition("_")
    if prefix != PREFIX or not name or not secret:
        raise Unauthenticated("invalid bearer token")
    try:
        record = await store.get(TOKEN, name)
        sealed = await store.get(TOKEN_DIGEST, name)
    except NotFound:
        raise Unauthenticated("invalid bearer token: unknown or revoked") from None
    if not hmac.compare_digest((sealed.spec or {}).get("sha256", ""), digest(secret)):
        raise Unauthenticated("invalid bearer token: unknown or revoked")
    spec = record.spec or {}
    expires_at = spec.get("expiresAt")
    if expires_at and datetime.fromisoformat(expires_at) <= datetime.now(UTC):
        raise Unauthenticated("bearer token expired")
    subject_kind = SUBJECT_KINDS.get(spec.get("subjectKind", ""))
    if subject_kind is None:
        raise Unauthenticated("invalid bearer token: unknown or revoked")
    kind, model = subject_kind
    try:
        subject = await store.get(kind, spec.get("subject", ""))
    except NotFound:
        raise Unauthenticated("invalid bearer token: its account no longer exists") from None
    if not any(ref.uid == subject.metadata.uid for ref in record.metadata.owner_references):
        raise Unauthenticated("invalid bearer token: its account no longer exists")
    identity = kind.spec_of(subject, model)
    scope = {INFRA_PROVIDER_LABEL: identity.provider_id} if identity.provider_id else {}
    return Identity(
        identity_name(kind.kind, subject.name), identity.role, scope, labels=subject.metadata.labels
    )
