"""Signing people in from verified claims, on a real store (SQLite, as ``herder serve`` keeps it): the
highest matching RoleRule wins, a person's group labels are exactly the provider's at each sign-in (an
Admin's own labels stay), ``--oidc-default-role`` gives the first role, and a disabled person is refused
with nothing issued."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from herder.api.oidc import Discovery, IdentityProvider, Keys, OidcSettings
from herder.api.people import People, SignInRefused
from herder.resources import Resource
from herder.resources.access import ROLE_RULE, TOKEN, group_label
from herder.resources.catalog import herder_registry
from herder.state.store import Store
from herder.state.url import open_store

ISSUER = "https://idp.example.com"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    made = await open_store(
        f"sqlite://{tmp_path / 'herder.db'}", herder_registry(), key_file=tmp_path / "key"
    )
    try:
        yield made
    finally:
        await made.close()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    # Signing people in from claims already verified never reaches the provider.
    async with httpx.AsyncClient() as client:
        yield client


def _people(store: Store, http: httpx.AsyncClient, **settings: Any) -> People:
    discovery = Discovery(ISSUER, f"{ISSUER}/auth", f"{ISSUER}/token", f"{ISSUER}/jwks")
    provider = IdentityProvider(
        OidcSettings(issuer=ISSUER, client_id="herder", **settings),
        discovery,
        Keys(discovery.jwks_uri, http),
        http,
    )
    return People(store, provider)


def _claims(*groups: str, sub: str = "ann") -> dict[str, Any]:
    return {"sub": sub, "email": f"{sub}@example.com", "email_verified": True, "groups": list(groups)}


async def _rule(store: Store, name: str, labels: dict[str, str], role: str) -> None:
    await store.create(
        Resource.model_validate(
            {
                "apiVersion": ROLE_RULE.api_version,
                "kind": ROLE_RULE.kind,
                "metadata": {"name": name},
                "spec": {"selector": {"matchLabels": labels}, "role": role},
            }
        )
    )


async def _sign_in(people: People, claims: dict[str, Any]) -> Resource:
    return (await people.sign_in(claims, expires_in=timedelta(minutes=5), description="test")).user


async def test_the_highest_matching_rule_wins(store: Store, http: httpx.AsyncClient) -> None:
    people = _people(store, http)
    await _rule(store, "readers", {group_label("staff"): "true"}, "Reader")
    await _rule(store, "admins", {group_label("/Platform Team"): "true"}, "Admin")
    await _rule(store, "operators", {group_label("staff"): "true"}, "Operator")
    ann = await _sign_in(people, _claims("staff", "/Platform Team"))
    assert (ann.spec or {})["role"] == "Admin"
    assert (ann.status or {})["roleRules"] == ["admins", "operators", "readers"]
    # Out of the platform team: the highest of the rules still matching.
    ann = await _sign_in(people, _claims("staff"))
    assert (ann.spec or {})["role"] == "Operator"


async def test_group_labels_follow_the_provider_and_an_admins_labels_stay(
    store: Store, http: httpx.AsyncClient
) -> None:
    people = _people(store, http)
    ann = await _sign_in(people, _claims("a", "b"))
    assert ann.metadata.labels == {group_label("a"): "true", group_label("b"): "true"}
    ann.metadata.labels["team"] = "blue"  # an Admin's own label
    await store.update(ann)
    ann = await _sign_in(people, _claims("b", "Ops Team"))
    assert ann.metadata.labels == {"team": "blue", group_label("b"): "true", group_label("Ops Team"): "true"}
    assert group_label("Ops Team") != group_label("ops-team")  # no two groups share a label


async def test_the_default_role_and_a_disabled_person(store: Store, http: httpx.AsyncClient) -> None:
    people = _people(store, http, default_role="Reader")
    ann = await _sign_in(people, _claims())
    assert (ann.spec or {})["role"] == "Reader"
    ann.spec = {**(ann.spec or {}), "disabled": True}
    await store.update(ann)
    issued = len((await store.list(TOKEN)).items)
    with pytest.raises(SignInRefused, match="ann@example.com is disabled"):
        await _sign_in(people, _claims())
    assert len((await store.list(TOKEN)).items) == issued
