"""Bearer tokens: issued at random, shown once, stored only as a digest; expiry and revocation.

A token reads ``hdr_<name>_<secret>``: ``name`` is its ``Token`` object (whose, until when) and
``secret`` is 32 random bytes in hex. The store keeps SHA-256 of the secret in a ``TokenDigest`` of
the same name. A fast hash is enough here: slow, salted password hashes exist to make guessing a
low-entropy human password expensive, but a 256-bit random secret cannot be guessed however cheap
each try is, and a fast digest keeps authenticating every request cheap. Deleting the ``Token`` (or
its subject) revokes it; a Token is bound to its subject's uid, so an account deleted and made again
under the same name does not inherit the old tokens. A disabled User's tokens authenticate nobody.

Identities are named as audit events, AccessPolicy rules and Kubernetes impersonation name them:
``serviceaccount:NAME`` for service accounts, and a person (a User) by their name alone, their verified
email (``alice@example.com``), as Omni names people. A User's name never holds ``:``, so the two cannot
meet; to the store, a person writes as ``user:NAME`` (``actor_of``).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import re
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
    TOKEN_SUBJECT_UID_LABEL,
    USER,
    IdentitySpec,
    UserSpec,
)
from herder.resources.audit_labels import audit_label_value
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
    """How an identity is named in audit events: ``serviceaccount:ci``, and a person by their name."""
    return name if kind == USER.kind else f"{kind.lower()}:{name}"


def actor_of(who: Identity) -> str:
    """The writer name the store records for ``who``: its name, and ``user:NAME`` for a person."""
    return who.name if ":" in who.name else f"user:{who.name}"


def subject_of(name: str) -> tuple[KindInfo, str] | None:
    """The kind and object name of the identity named ``name`` as audit events name it (``user:NAME``
    too); None for a name no ServiceAccount or User can bear."""
    prefix, sep, bare = name.partition(":")
    if not sep:
        return USER, name
    kind = {"serviceaccount": SERVICE_ACCOUNT, "user": USER}.get(prefix.lower())
    return (kind, bare) if kind is not None and bare else None


def _identity(kind: KindInfo, subject: Resource) -> Identity:
    _, model = SUBJECT_KINDS[kind.kind]
    spec = kind.spec_of(subject, model)
    scope = {INFRA_PROVIDER_LABEL: spec.provider_id} if spec.provider_id else {}
    return Identity(identity_name(kind.kind, subject.name), spec.role, scope, labels=subject.metadata.labels)


def disabled(subject: Resource) -> bool:
    """Whether ``subject`` is a User an Admin disabled."""
    return subject.kind == USER.kind and bool((subject.spec or {}).get("disabled"))


async def account(store: Store, name: str) -> Identity | None:
    """The ServiceAccount or User called ``name`` (``serviceaccount:NAME``, a person's name, ``user:NAME``;
    a bare name a ServiceAccount's too), as an identity; None when there is none or it is disabled."""
    found = subject_of(name)
    if found is None:
        return None
    kinds = (SERVICE_ACCOUNT, USER) if ":" not in name else (found[0],)
    for kind in kinds:
        try:
            subject = await store.get(kind, found[1])
        except (NotFound, ValueError):
            continue
        return None if disabled(subject) else _identity(kind, subject)
    return None


_NOT_IN_TOKEN_NAME = re.compile(r"[^a-z0-9.-]+")


def _name_base(subject: str) -> str:
    """The start of a token's name: its subject's, as a subdomain (a person's email holds ``@``)."""
    return _NOT_IN_TOKEN_NAME.sub("-", subject.lower())[:200].strip("-.") or "token"


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
    labels = {TOKEN_SUBJECT_UID_LABEL: owner.metadata.uid or ""}
    if audit_label_value(subject) == subject:
        labels[TOKEN_SUBJECT_LABEL] = subject
    for _ in range(5):
        name = f"{_name_base(subject)}-{secrets.token_hex(4)}"
        secret = secrets.token_hex(32)
        token = Resource.model_validate(
            {
                "apiVersion": TOKEN.api_version,
                "kind": TOKEN.kind,
                "metadata": {
                    "name": name,
                    "labels": labels,
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


async def _presented(store: Store, token: str) -> Resource:
    """The Token record whose secret ``token`` holds, expired or not; ``Unauthenticated`` otherwise."""
    prefix, _, rest = token.partition("_")
    name, _, secret = rest.rpartition("_")
    if prefix != PREFIX or not name or not secret:
        raise Unauthenticated("invalid bearer token")
    try:
        record = await store.get(TOKEN, name)
        sealed = await store.get(TOKEN_DIGEST, name)
    except (NotFound, ValueError):
        raise Unauthenticated("invalid bearer token: unknown or revoked") from None
    if not hmac.compare_digest((sealed.spec or {}).get("sha256", ""), digest(secret)):
        raise Unauthenticated("invalid bearer token: unknown or revoked")
    return record


async def _subject(store: Store, record: Resource) -> tuple[KindInfo, Resource]:
    spec = record.spec or {}
    subject_kind = SUBJECT_KINDS.get(spec.get("subjectKind", ""))
    if subject_kind is None:
        raise Unauthenticated("invalid bearer token: unknown or revoked")
    kind, _ = subject_kind
    try:
        subject = await store.get(kind, spec.get("subject", ""))
    except NotFound:
        raise Unauthenticated("invalid bearer token: its account no longer exists") from None
    if not any(ref.uid == subject.metadata.uid for ref in record.metadata.owner_references):
        raise Unauthenticated("invalid bearer token: its account no longer exists")
    if disabled(subject):
        raise Unauthenticated("invalid bearer token: its account is disabled")
    return kind, subject


async def authenticate(store: Store, token: str) -> Identity:
    """The identity a presented token stands for; ``Unauthenticated`` for anything else.

    The messages never repeat the token, and do not tell a revoked token from one never issued.
    """
    record = await _presented(store, token)
    expires_at = (record.spec or {}).get("expiresAt")
    if expires_at and datetime.fromisoformat(expires_at) <= datetime.now(UTC):
        raise Unauthenticated("bearer token expired")
    kind, subject = await _subject(store, record)
    return _identity(kind, subject)


async def revoke(store: Store, token: str, *, subject_uid: str | None = None) -> Resource:
    """Delete the Token ``token`` holds the secret of, expired or not (its holder signs out); with
    ``subject_uid``, only a token of that account. The deleted record is returned."""
    record = await _presented(store, token)
    if subject_uid is not None and record.metadata.labels.get(TOKEN_SUBJECT_UID_LABEL) != subject_uid:
        raise Unauthenticated("invalid bearer token: not one of this account's")
    with contextlib.suppress(NotFound):
        await store.delete(TOKEN, record.name, actor=SYSTEM)
    return record


async def prune_expired(store: Store, subject_uid: str) -> int:
    """Delete the expired tokens of the account whose uid is ``subject_uid``; how many went."""
    now = datetime.now(UTC)
    gone = 0
    for record in (await store.list(TOKEN, label_selector=f"{TOKEN_SUBJECT_UID_LABEL}={subject_uid}")).items:
        expires_at = (record.spec or {}).get("expiresAt")
        if expires_at and datetime.fromisoformat(expires_at) <= now:
            with contextlib.suppress(NotFound):
                await store.delete(TOKEN, record.name, actor=SYSTEM)
                gone += 1
    return gone
