"""The web UI's sessions in the state store (SQLite, as ``herder serve`` keeps them): a session outlives
its Sessions object (a restart) and is served by any replica (two stores on one real etcd), ends after its idle timeout and at its absolute one
whatever its use, keeps its messages, and a sign-in under way is taken once, and not after ten minutes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from herder.api import tokens
from herder.api.sessions import PENDING_TTL, Sessions, key_of
from herder.krm.policy import Unauthenticated
from herder.resources import Resource
from herder.resources.access import USER, WEB_SESSION
from herder.resources.catalog import herder_registry
from herder.state.etcd_process import EtcdCluster, etcd_available
from herder.state.store import Store
from herder.state.url import open_store


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    made = await open_store(
        f"sqlite://{tmp_path / 'herder.db'}", herder_registry(), key_file=tmp_path / "key"
    )
    try:
        yield made
    finally:
        await made.close()


async def _token(store: Store) -> str:
    await store.create(
        Resource.model_validate(
            {
                "apiVersion": USER.api_version,
                "kind": USER.kind,
                "metadata": {"name": "ann@example.com"},
                "spec": {},
            }
        )
    )
    return (await tokens.issue(store, USER, "ann@example.com", expires_in=timedelta(hours=1))).token


async def test_a_session_outlives_the_process_that_opened_it(store: Store) -> None:
    token = await _token(store)
    session_id, opened = await Sessions(store).open(token)
    opened.flash("cluster web created")
    await Sessions(store).save(opened)
    again = await Sessions(store).get(session_id)
    assert again is not None and again.token == token and again.csrf == opened.csrf
    assert again.flashes() == ["cluster web created"]
    # Nothing stored is the session's id: the object is named by its digest, and is sealed at rest.
    stored = await store.get(WEB_SESSION, key_of(session_id))
    assert session_id not in stored.model_dump_json() and WEB_SESSION.sensitive
    assert await Sessions(store).get(stored.name) is None  # what the store holds is no way in
    assert await Sessions(store).get("not-a-session") is None


async def test_a_session_ends_when_idle_and_at_its_absolute_end(store: Store) -> None:
    token = await _token(store)
    clock = Clock()
    sessions = Sessions(store, idle=timedelta(minutes=30), max_age=timedelta(hours=2), now=clock)
    idle_id, _ = await sessions.open(token)
    busy_id, _ = await sessions.open(token)
    for _ in range(5):  # 100 minutes of use, a request every 20
        clock.now += timedelta(minutes=20)
        busy = await sessions.get(busy_id)
        assert busy is not None
        await sessions.save(busy)
    assert await sessions.get(idle_id) is None  # unused for longer than 30 minutes: ended, and deleted
    assert len((await store.list(WEB_SESSION)).items) == 1
    clock.now += timedelta(minutes=21)  # 2 h 1 min after it began: ended however busy
    assert await sessions.get(busy_id) is None


async def test_closing_a_provider_session_revokes_the_token_it_was_given(store: Store) -> None:
    token = await _token(store)
    sessions = Sessions(store)
    pasted_id, _ = await sessions.open(token)
    assert await sessions.close(pasted_id) is not None
    assert (await tokens.authenticate(store, token)).name == "ann@example.com"  # a pasted token is the user's
    issued = (await tokens.issue(store, USER, "ann@example.com")).token
    signed_in_id, _ = await sessions.open(issued, id_token="eyJ.id.token")
    closed = await sessions.close(signed_in_id)
    assert closed is not None and closed.id_token == "eyJ.id.token"
    with pytest.raises(Unauthenticated):
        await tokens.authenticate(store, issued)


async def test_a_sign_in_under_way_is_taken_once_and_not_when_stale(store: Store) -> None:
    clock = Clock()
    sessions = Sessions(store, now=clock)
    first = await sessions.begin({"state": "s", "nonce": "n", "verifier": "v", "redirectUri": "https://h/cb"})
    assert await sessions.get(first) is None  # not a session anyone is signed in with
    assert await sessions.take_pending(first) == {
        "state": "s",
        "nonce": "n",
        "verifier": "v",
        "redirectUri": "https://h/cb",
    }
    assert await sessions.take_pending(first) is None
    stale = await sessions.begin({"state": "s", "nonce": "n", "verifier": "v", "redirectUri": "https://h/cb"})
    clock.now += PENDING_TTL + timedelta(seconds=1)
    assert await sessions.take_pending(stale) is None


@pytest.fixture(scope="module")
def etcd() -> Iterator[str]:
    if not etcd_available():
        pytest.skip("the etcd binary is not installed (make test installs Debian's etcd-server)")
    with EtcdCluster() as cluster:
        yield ",".join(cluster.endpoints)


async def test_replicas_share_sessions_and_a_sign_in_is_taken_by_one_of_them(
    etcd: str, tmp_path: Path
) -> None:
    replicas = [
        await open_store(
            f"etcd://{etcd}/sessions-{tmp_path.name}", herder_registry(), key_file=tmp_path / "key"
        )
        for _ in range(2)
    ]
    try:
        one, other = Sessions(replicas[0]), Sessions(replicas[1])
        session_id, _ = await one.open(await _token(replicas[0]))
        assert await other.get(session_id) is not None
        assert await other.close(session_id) is not None
        assert await one.get(session_id) is None
        for _ in range(5):
            # The provider's callback reaching both replicas at once (a retried request): one takes it.
            pending = await one.begin(
                {"state": "s", "nonce": "n", "verifier": "v", "redirectUri": "https://h/cb"}
            )
            taken = await asyncio.gather(one.take_pending(pending), other.take_pending(pending))
            assert sum(t is not None for t in taken) == 1
    finally:
        for replica in replicas:
            await replica.close()
