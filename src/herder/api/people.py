"""People signing in: from a verified ID token to a ``User`` and a short-lived herder token.

A sign-in (through the web UI, or the CLI handing in the ID token it got) names the person by their
verified email, lowercased (``--oidc-allow-unverified-email``: any email), else by the provider's ``sub``
(``sub-<sha256>`` when the sub could be mistaken for an email or holds what a name may not). Their first
sign-in makes their User with the default role (``--oidc-default-role``, ``None`` unless given). Every
sign-in then brings the User up to date: its group labels (``groups.herder.dev/…``, from the groups claim)
are exactly the provider's groups, and the RoleRules whose selector matches its labels give it their
highest role. When no rule matches any more a role that rules gave, it falls back to the default role; a
role no rule gave (an Admin's) stays. A disabled User is refused.

herder then issues its own bearer token for the person, expiring soon (``ACCESS_TOKEN_TTL`` for the CLI,
the session's end for the web UI): every request is authenticated from herder's store, so disabling or
deleting the User ends it at once. The CLI keeps the provider's refresh token and, when herder's token
expires, hands in a fresh ID token for a new one (so the provider is asked again whether the person is
still there), which also replaces the token it had.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from herder.api import tokens
from herder.api.cluster_access import LADDER, higher
from herder.api.oidc import IdentityProvider
from herder.krm.policy import Identity
from herder.resources import Resource
from herder.resources.access import (
    GROUP_LABEL_PREFIX,
    GROUP_LABEL_VALUE,
    ROLE_RULE,
    USER,
    RoleRuleSpec,
    group_label,
)
from herder.state.errors import AlreadyExists, Conflict, NotFound
from herder.state.selectors import LabelSelector
from herder.state.store import SYSTEM, Store

ACCESS_TOKEN_TTL = timedelta(minutes=15)
"""How long the herder token of a CLI sign-in lasts (the CLI gets another with a fresh ID token)."""
_EMAIL = re.compile(r"^[^@\s:/%]+@[^@\s:/%]+$")
_SUB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._~+=|-]{0,199}$")


class SignInRefused(Exception):
    """A verified person who may not sign in (disabled), or a token that names nobody usable."""


@dataclass(frozen=True)
class SignedIn:
    who: Identity
    user: Resource
    token: tokens.IssuedToken


def user_name(claims: Mapping[str, Any], allow_unverified_email: bool) -> str:
    """What the person's User is named: their verified email, else their sub (see the module's doc)."""
    email = claims.get("email")
    verified = claims.get("email_verified") in (True, "true")
    if isinstance(email, str) and _EMAIL.match(email) and (verified or allow_unverified_email):
        return email.lower()
    sub = str(claims.get("sub") or "")
    if not sub:
        raise SignInRefused("the ID token names nobody: it has neither a verified email nor a sub")
    if _SUB_NAME.match(sub):
        return sub
    return "sub-" + hashlib.sha256(sub.encode()).hexdigest()[:40]


def groups_of(claims: Mapping[str, Any], claim: str) -> list[str]:
    """The groups claim as a list of names (a provider may give one group as a string)."""
    value = claims.get(claim)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return sorted({str(g) for g in value if isinstance(g, str | int) and str(g)})


def _rule_role(rules: list[Resource], labels: Mapping[str, str]) -> tuple[str | None, list[str]]:
    """The highest role of the RoleRules matching ``labels`` (None: none matches), and their names."""
    role: str | None = None
    names = []
    for rule in rules:
        spec = ROLE_RULE.spec_of(rule, RoleRuleSpec)
        if LabelSelector.parse(spec.selector.to_selector_string()).matches(labels):
            role = spec.role if role is None else higher(role, spec.role)
            names.append(rule.name)
    return role, sorted(names)


class People:
    """Signs people in against one provider, over one store."""

    def __init__(self, store: Store, provider: IdentityProvider) -> None:
        self._store = store
        self.provider = provider
        self._settings = provider.settings

    async def sign_in(
        self, claims: Mapping[str, Any], *, expires_in: timedelta, description: str
    ) -> SignedIn:
        """Bring the person's User up to date from verified ``claims`` and issue them a token."""
        user = await self._user(claims)
        if tokens.disabled(user):
            raise SignInRefused(f"{user.name} is disabled: ask an Admin of herder")
        uid = user.metadata.uid or ""
        with contextlib.suppress(Exception):  # tidying: never a reason to refuse a sign-in
            await tokens.prune_expired(self._store, uid)
        issued = await tokens.issue(
            self._store, USER, user.name, expires_in=expires_in, description=description
        )
        who = await tokens.authenticate(self._store, issued.token)
        return SignedIn(who, user, issued)

    async def _user(self, claims: Mapping[str, Any]) -> Resource:
        name = user_name(claims, self._settings.allow_unverified_email)
        groups = groups_of(claims, self._settings.groups_claim)
        for _ in range(5):
            try:
                return await self._upsert(name, claims, groups)
            except (Conflict, AlreadyExists):
                await asyncio.sleep(0.05)  # the same person signing in twice at once: read again
        raise SignInRefused(f"{name}: the User kept changing while signing in; try again")

    async def _upsert(self, name: str, claims: Mapping[str, Any], groups: list[str]) -> Resource:
        try:
            current: Resource | None = await self._store.get(USER, name)
        except NotFound:
            current = None
        sub = str(claims.get("sub") or "")
        status = dict(current.status or {}) if current is not None else {}
        if current is not None and name == sub and status.get("subject") not in (None, "", sub):
            # Named by sub: only that sub is this person.
            raise SignInRefused(f"{name} is another person of the identity provider")
        labels = {k: v for k, v in (current.metadata.labels if current else {}).items()}
        labels = {k: v for k, v in labels.items() if not k.startswith(GROUP_LABEL_PREFIX)}
        labels |= {group_label(g): GROUP_LABEL_VALUE for g in groups}
        rules = (await self._store.list(ROLE_RULE)).items
        ruled, rule_names = _rule_role(rules, labels)
        spec = dict(current.spec or {}) if current is not None else {}
        default = self._settings.default_role
        if ruled is not None:
            role = ruled
        elif current is None or status.get("roleRules"):
            role = default
        else:
            role = spec.get("role") or default
        email = claims.get("email")
        spec |= {"role": role if role in LADDER else default}
        if isinstance(email, str):
            spec["email"] = email
        if isinstance(claims.get("name"), str):
            spec["displayName"] = claims["name"]
        body: dict[str, Any] = {
            "apiVersion": USER.api_version,
            "kind": USER.kind,
            "metadata": {
                "name": name,
                "labels": labels,
                **(
                    {
                        "resourceVersion": current.metadata.resource_version,
                        "annotations": current.metadata.annotations,
                    }
                    if current is not None
                    else {}
                ),
            },
            "spec": spec,
        }
        if current is None:
            stored = await self._store.create(Resource.model_validate(body), actor=SYSTEM)
        elif spec != (current.spec or {}) or labels != current.metadata.labels:
            stored = await self._store.update(Resource.model_validate(body), actor=SYSTEM)
        else:
            stored = current
        new_status = {
            "issuer": self.provider.discovery.issuer,
            "subject": sub,
            "emailVerified": claims.get("email_verified") in (True, "true"),
            "groups": [{"name": g, "label": group_label(g)} for g in groups],
            "roleRules": rule_names,
            "lastSignInTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        with_status = stored.model_copy(update={"status": new_status})
        return await self._store.update_status(with_status, actor=SYSTEM)
