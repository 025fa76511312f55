"""DisabledUser's decisions: a disabled person's tokens go, nobody else's; an enabled person keeps theirs."""

from __future__ import annotations

from herder.controllers.access.disabled_users import DisabledUserController
from herder.resources.access import TOKEN_SUBJECT_UID_LABEL, USER
from herder.runtime.controller import ObjectKey
from tests.controllers.site import Site, obj


async def _people(site: Site) -> None:
    await site.create(
        obj("User", "alice@example.com", namespaced=False, spec={"role": "Reader"}),
        obj("User", "bob@example.com", namespaced=False, spec={"role": "Reader"}),
        obj("ServiceAccount", "ci", namespaced=False, spec={"role": "Operator"}),
    )
    # Tokens as herder.api.tokens issues them (their sealed digests need a store with a key: left out).
    for kind, name in (("User", "alice@example.com"), ("User", "bob@example.com"), ("ServiceAccount", "ci")):
        subject = await site.store.get(kind, name)
        for n in range(2):
            ref = {"apiVersion": subject.api_version, "kind": kind, "name": name, "uid": subject.metadata.uid}
            labels = {TOKEN_SUBJECT_UID_LABEL: subject.metadata.uid}
            await site.create(
                obj(
                    "Token",
                    f"{name.replace('@', '-')}-{n}",
                    namespaced=False,
                    spec={"subjectKind": kind, "subject": name},
                    metadata={"labels": labels, "ownerReferences": [ref]},
                )
            )


async def _tokens_of(site: Site, subject: str) -> int:
    return sum((t.spec or {}).get("subject") == subject for t in (await site.store.list("Token")).items)


async def test_a_disabled_persons_tokens_go_and_nobody_elses(site: Site) -> None:
    await _people(site)
    alice = await site.store.get(USER, "alice@example.com")
    alice.spec = {**(alice.spec or {}), "disabled": True}
    await site.store.update(alice)
    await site.reconcile(DisabledUserController(), ObjectKey("User", None, "alice@example.com"))
    assert await _tokens_of(site, "alice@example.com") == 0
    assert await _tokens_of(site, "bob@example.com") == 2
    assert await _tokens_of(site, "ci") == 2


async def test_an_enabled_person_keeps_their_tokens(site: Site) -> None:
    await _people(site)
    await site.reconcile(DisabledUserController(), ObjectKey("User", None, "bob@example.com"))
    await site.reconcile(DisabledUserController(), ObjectKey("User", None, "gone@example.com"))
    assert await _tokens_of(site, "bob@example.com") == 2
