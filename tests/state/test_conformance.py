"""The storage contract, run unchanged against every backend (see conftest.BACKENDS)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from herder.resources import InvalidObject, Resource, UnknownKind
from herder.state.backend import RawEvent
from herder.state.errors import AlreadyExists, Conflict, Forbidden, Gone, Invalid, NotFound
from herder.state.store import CONTROLLER_ANNOTATION, Change, Store, WatchEvent
from tests.state.conftest import Harness, ns, patch


async def next_events(it: AsyncIterator[WatchEvent], n: int, timeout: float = 10) -> list[WatchEvent]:
    out = []
    for _ in range(n):
        out.append(await asyncio.wait_for(anext(it), timeout))
    return out


async def test_create_sets_metadata_and_get_returns_it(store: Store) -> None:
    made = await store.create(patch("a", labels={"tier": "x"}))
    meta = made.metadata
    assert meta.uid and meta.creation_timestamp and meta.generation == 1
    assert int(meta.resource_version or 0) > 0
    got = await store.get("configpatches", "a", "default")
    assert got == made
    assert got.spec == {"data": "machine: {}", "description": ""}


async def test_create_twice_is_already_exists(store: Store) -> None:
    await store.create(patch("a"))
    with pytest.raises(AlreadyExists, match='"a" already exists'):
        await store.create(patch("a"))


async def test_create_in_missing_namespace_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound, match="nowhere"):
        await store.create(patch("a", namespace="nowhere"))


async def test_generate_name(store: Store) -> None:
    obj = patch("x")
    obj.metadata.name, obj.metadata.generate_name = None, "gen-"
    made = await store.create(obj)
    assert made.name.startswith("gen-") and len(made.name) == 9


async def test_invalid_spec_names_the_field(store: Store) -> None:
    bad = patch("a")
    bad.spec = {"data": "", "colour": "blue"}
    with pytest.raises(InvalidObject) as err:
        await store.create(bad)
    fields = {c.field for c in err.value.causes}
    assert fields == {"spec.data", "spec.colour"}
    assert "unknown field" in str(err.value)


async def test_invalid_name_and_unknown_kind(store: Store) -> None:
    with pytest.raises(InvalidObject, match="metadata.name"):
        await store.create(patch("Not_A_Name"))
    with pytest.raises(UnknownKind, match="Widget"):
        await store.create(Resource.model_validate({"apiVersion": "herder.dev/v1alpha1", "kind": "Widget"}))
    with pytest.raises(UnknownKind):
        await store.get("widgets", "a")


async def test_missing_object_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        await store.get("configpatches", "nope", "default")
    with pytest.raises(NotFound):
        await store.delete("configpatches", "nope", "default")


async def test_update_with_stale_resource_version_conflicts(store: Store) -> None:
    made = await store.create(patch("a"))
    fresh = made.model_copy(deep=True)
    fresh.spec = {"data": "machine: {install: {}}"}
    updated = await store.update(fresh)
    assert updated.metadata.generation == 2
    assert int(updated.metadata.resource_version or 0) > int(made.metadata.resource_version or 0)
    stale = made.model_copy(deep=True)
    stale.spec = {"data": "cluster: {}"}
    with pytest.raises(Conflict, match="has been modified"):
        await store.update(stale)
    assert (await store.get("cp", "a", "default")).spec == updated.spec


async def test_generation_follows_spec_not_metadata(store: Store) -> None:
    made = await store.create(patch("a"))
    made.metadata.labels["x"] = "y"
    relabelled = await store.update(made)
    assert relabelled.metadata.generation == 1
    unchanged = await store.update(relabelled.model_copy(deep=True))
    assert unchanged.metadata.resource_version == relabelled.metadata.resource_version


async def test_status_and_spec_are_written_separately(store: Store) -> None:
    nsobj = await store.get("namespaces", "default")
    nsobj.status = {"phase": "Terminating"}
    written = await store.update_status(nsobj)
    assert written.status == {"phase": "Terminating"}
    assert written.metadata.generation == nsobj.metadata.generation
    # update() keeps the stored status whatever the caller sends
    written.status = {"phase": "Active"}
    written.metadata.labels["a"] = "b"
    after = await store.update(written)
    assert after.status == {"phase": "Terminating"} and after.metadata.labels == {"a": "b"}
    bad = after.model_copy(deep=True)
    bad.status = {"phase": "Active", "extra": 1}
    with pytest.raises(InvalidObject, match=r"status\.extra"):
        await store.update_status(bad)


async def test_delete_with_finalizers_waits_for_them(store: Store) -> None:
    await store.create(patch("a", finalizers=["herder.dev/test"]))
    marked = await store.delete("cp", "a", "default")
    assert marked.metadata.deletion_timestamp and marked.metadata.finalizers == ["herder.dev/test"]
    again = await store.delete("cp", "a", "default")
    assert again.metadata.deletion_timestamp == marked.metadata.deletion_timestamp
    cur = await store.get("cp", "a", "default")
    cur.metadata.finalizers.append("herder.dev/other")
    with pytest.raises(Invalid, match="no new finalizers"):
        await store.update(cur)
    cur.metadata.finalizers = []
    await store.update(cur)
    with pytest.raises(NotFound):
        await store.get("cp", "a", "default")


async def test_delete_preconditions(store: Store) -> None:
    made = await store.create(patch("a"))
    with pytest.raises(Conflict):
        await store.delete("cp", "a", "default", uid="not-the-uid")
    with pytest.raises(Conflict):
        await store.delete("cp", "a", "default", resource_version="1")
    gone = await store.delete("cp", "a", "default", uid=made.metadata.uid)
    assert gone.name == "a"


async def test_dry_run_writes_nothing(store: Store) -> None:
    rev = await store.revision()
    await store.create(patch("a"), dry_run=True)
    with pytest.raises(NotFound):
        await store.get("cp", "a", "default")
    assert await store.revision() == rev


async def test_controller_owned_objects_refuse_other_writers(store: Store) -> None:
    owned = patch("owned", annotations={CONTROLLER_ANNOTATION: "ClusterController"})
    owned.metadata.owner_references = []
    made = await store.create(owned, actor="ClusterController")
    made.spec = {"data": "cluster: {}"}
    with pytest.raises(Forbidden, match="managed by controller ClusterController"):
        await store.update(made.model_copy(deep=True), actor="user:alice")
    with pytest.raises(Forbidden):
        await store.delete("cp", "owned", "default", actor="user:alice")
    # A finalizer of one's own may be added or dropped by anyone the API lets write.
    fin = await store.get("cp", "owned", "default")
    fin.metadata.finalizers.append("provider.example/cleanup")
    fin = await store.update(fin, actor="provider")
    fin.spec = {"data": "cluster: {}"}
    assert (await store.update(fin, actor="ClusterController")).spec == {
        "data": "cluster: {}",
        "description": "",
    }


async def test_resource_version_is_global_and_grows(store: Store) -> None:
    revs = []
    for i in range(3):
        revs.append(int((await store.create(patch(f"p{i}"))).metadata.resource_version or 0))
        revs.append(int((await store.create(ns(f"n{i}"))).metadata.resource_version or 0))
    assert revs == sorted(revs) and len(set(revs)) == len(revs)
    assert await store.revision() >= revs[-1]


async def test_list_selectors_and_namespaces(store: Store) -> None:
    await store.create(ns("other"))
    await store.create(patch("a", labels={"env": "prod", "tier": "cp"}))
    await store.create(patch("b", labels={"env": "dev"}))
    await store.create(patch("c"))
    await store.create(patch("d", namespace="other", labels={"env": "prod"}))

    async def names(namespace: str | None = None, **kw: str) -> list[str]:
        return [o.name for o in (await store.list("cp", namespace, **kw)).items]  # type: ignore[arg-type]

    assert await names() == ["a", "b", "c", "d"]
    assert await names("default") == ["a", "b", "c"]
    assert await names(label_selector="env=prod") == ["a", "d"]
    assert await names(label_selector="env!=prod") == ["b", "c"]
    assert await names(label_selector="env in (dev, prod),tier") == ["a"]
    assert await names(label_selector="env notin (dev),!tier") == ["c", "d"]
    assert await names(label_selector="env") == ["a", "b", "d"]
    assert await names(field_selector="metadata.name=b") == ["b"]
    assert await names(field_selector="metadata.namespace=other") == ["d"]
    assert await names(field_selector="metadata.name!=a,metadata.namespace==default") == ["b", "c"]
    for bad in ("env in (", "a b", "=x", "x=y,"):
        with pytest.raises(Invalid, match="label selector"):
            await names(label_selector=bad)
    with pytest.raises(Invalid, match="spec.data"):
        await names(field_selector="spec.data=x")


async def test_list_pagination_returns_every_item_once(store: Store) -> None:
    for i in range(23):
        await store.create(patch(f"p{i:02d}", labels={"odd": str(i % 2)}))
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = await store.list("cp", "default", label_selector="odd=1", limit=4, continue_token=token)
        seen += [o.name for o in page.items]
        pages += 1
        token = page.continue_token
        if token is None:
            break
    assert seen == [f"p{i:02d}" for i in range(1, 23, 2)]
    assert pages == 3
    with pytest.raises(Invalid, match="continue"):
        await store.list("cp", "default", limit=4, continue_token="garbage!")


async def test_count_and_pages_filtered_by_where(store: Store) -> None:
    await store.create(ns("other"))
    for i in range(8):
        namespace = "other" if i >= 6 else "default"
        await store.create(patch(f"q{i}", namespace=namespace, labels={"kept": str(i % 3 == 0).lower()}))
    assert await store.count("cp") == 8
    assert await store.count("cp", "default") == 6
    assert await store.count("namespaces") == 2

    def kept(obj: Resource) -> bool:
        return obj.metadata.labels["kept"] == "true"

    # Pages are full of kept objects, and the last has no token although an unkept object follows.
    pages: list[list[str]] = []
    token = None
    while True:
        page = await store.list("cp", limit=1, continue_token=token, where=kept)
        pages.append([o.name for o in page.items])
        if (token := page.continue_token) is None:
            break
    assert pages == [["q0"], ["q3"], ["q6"]]


async def test_watch_sees_changes_in_order(store: Store) -> None:
    it = store.watch("configpatches", "default")
    start = asyncio.ensure_future(anext(it))
    await asyncio.sleep(0.1)
    made = await store.create(patch("a"))
    made.spec = {"data": "cluster: {}"}
    await store.update(made)
    await store.delete("cp", "a", "default")
    first = await asyncio.wait_for(start, 10)
    rest = await next_events(it, 2)
    events = [first, *rest]
    assert [e.type for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    revs = [int(e.object.metadata.resource_version or 0) for e in events]
    assert revs == sorted(revs) and len(set(revs)) == 3
    await it.aclose()


async def test_watch_resumes_without_gap_or_duplicate(store: Store) -> None:
    base = await store.revision()
    for i in range(30):
        await store.create(patch(f"p{i:02d}"))
    it = store.watch("cp", resource_version=base)
    first = await next_events(it, 12)
    await it.aclose()
    resume_from = first[-1].object.metadata.resource_version
    for i in range(30, 35):
        await store.create(patch(f"p{i:02d}"))
    it = store.watch("cp", resource_version=resume_from)
    rest = await next_events(it, 23)
    await it.aclose()
    names = [e.object.name for e in first + rest]
    assert names == [f"p{i:02d}" for i in range(35)]


async def test_watch_with_initial_events(store: Store) -> None:
    await store.create(patch("a"))
    await store.create(patch("b"))
    it = store.watch("cp", "default", send_initial_events=True)
    initial = await next_events(it, 2)
    assert [(e.type, e.object.name) for e in initial] == [("ADDED", "a"), ("ADDED", "b")]
    await store.create(patch("c"))
    (live,) = await next_events(it, 1)
    assert (live.type, live.object.name) == ("ADDED", "c")
    await it.aclose()


async def test_watch_label_selector_transitions(store: Store) -> None:
    it = store.watch("cp", label_selector="env=prod")
    pending = asyncio.ensure_future(anext(it))
    await asyncio.sleep(0.1)
    made = await store.create(patch("a", labels={"env": "dev"}))
    made.metadata.labels["env"] = "prod"
    made = await store.update(made)
    made.metadata.labels["env"] = "dev"
    await store.update(made)
    await store.create(patch("b", labels={"env": "prod"}))
    events = [await asyncio.wait_for(pending, 10), *await next_events(it, 2)]
    assert [(e.type, e.object.name) for e in events] == [("ADDED", "a"), ("DELETED", "a"), ("ADDED", "b")]
    await it.aclose()


async def test_a_change_that_fails_to_publish_still_reaches_watchers(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Embedded backends hand each change to the store's watch as part of its commit: a failure there
    # must neither fail the committed write nor drop the change for the watchers.
    it = store.watch("cp", "default")
    pending = asyncio.ensure_future(anext(it))
    await asyncio.sleep(0.1)
    decode, failed = store._hub._decode, []

    def flaky(raw: RawEvent) -> Change:
        if raw.key.endswith("/a") and not failed:
            failed.append(raw.rev)
            raise RuntimeError("injected")
        return decode(raw)

    monkeypatch.setattr(store._hub, "_decode", flaky)
    made = await store.create(patch("a"))
    first = await asyncio.wait_for(pending, 10)
    assert failed == [int(made.metadata.resource_version or 0)]
    assert (first.type, first.object.name) == ("ADDED", "a")
    await store.create(patch("b"))
    (second,) = await next_events(it, 1)
    assert (second.type, second.object.name) == ("ADDED", "b")
    assert [o.name for o in (await store.list("cp", "default")).items] == ["a", "b"]
    await it.aclose()


async def test_watch_every_kind_and_bookmarks(store: Store) -> None:
    it = store.watch(bookmark_interval=0.2)
    pending = asyncio.ensure_future(anext(it))
    await asyncio.sleep(0.1)
    await store.create(ns("n1"))
    await store.create(patch("a"))
    events = [await asyncio.wait_for(pending, 10), *await next_events(it, 1)]
    assert [e.object.kind for e in events] == ["Namespace", "ConfigPatch"]
    await it.aclose()
    it = store.watch("cp", bookmark_interval=0.2)
    (bookmark,) = await next_events(it, 1)
    assert bookmark.type == "BOOKMARK"
    assert int(bookmark.object.metadata.resource_version or 0) >= int(
        events[-1].object.metadata.resource_version or 0
    )
    await it.aclose()


async def test_watch_from_compacted_revision_is_gone(harness: Harness) -> None:
    store = harness.store
    old = await store.revision()
    for i in range(5):
        await store.create(patch(f"p{i}"))
    await harness.backend.compact(await store.revision())
    # Past the watch hub's own ring too, so the request reaches the backend's history.
    store._hub.covered_from = await store.revision() + 1
    store._hub._ring.clear()
    it = store.watch("cp", resource_version=old)
    with pytest.raises(Gone, match="too old resource version"):
        await asyncio.wait_for(anext(it), 10)


async def test_sensitive_kinds_are_encrypted_at_rest(harness: Harness) -> None:
    secret = "-----BEGIN PRIVATE KEY----- very-secret-material-4242"
    obj = Resource.model_validate(
        {
            "apiVersion": "herder.dev/v1alpha1",
            "kind": "ClusterSecrets",
            "metadata": {"name": "c1", "namespace": "default"},
            "spec": {"bundle": secret},
        }
    )
    await harness.store.create(obj)
    await harness.store.create(patch("plain", data="visible-marker: 1"))
    assert (await harness.store.get("clustersecrets", "c1", "default")).spec["bundle"] == secret  # type: ignore[index]
    raw = b"".join(await harness.raw_values())
    assert b"visible-marker" in raw  # the check below looks where the data is
    assert b"very-secret-material" not in raw


async def test_concurrent_unconditional_updates_all_succeed(store: Store) -> None:
    await store.create(patch("shared"))

    async def write(i: int) -> Resource:
        obj = patch("shared", data=f"writer: {i}")  # no resourceVersion: unconditional
        return await store.update(obj)

    results = await asyncio.gather(*(write(i) for i in range(8)))
    revs = {r.metadata.resource_version for r in results}
    assert len(revs) == 8
    final = await store.get("cp", "shared", "default")
    assert final.spec is not None and final.spec["data"].startswith("writer: ")


async def test_a_new_namespace_is_active(store: Store) -> None:
    made = await store.create(ns("fresh"))
    assert made.status == {"phase": "Active"}
    assert (await store.get("namespaces", "fresh")).status == {"phase": "Active"}


async def test_lists_show_each_write_once_it_is_acknowledged(harness: Harness) -> None:
    # Lists of a kind listed before may be served from memory (where the backend's watch allows it):
    # after every write they must still show what the backend holds, at its revision.
    store = harness.store
    await store.create(ns("other"))

    async def listed(**selectors: str) -> list[tuple[str, str | None]]:
        result = await store.list("cp", **selectors)  # type: ignore[arg-type]
        assert all(o.resource_version <= result.resource_version for o in result.items)
        return [(o.name, o.metadata.resource_version) for o in result.items]

    async def held() -> list[tuple[str, str | None]]:
        kvs, _ = await harness.backend.range(Store.kind_prefix(store.kind("cp")))
        return [(kv.key.rsplit("/", 1)[1], str(kv.mod_rev)) for kv in kvs]

    assert await listed() == []
    a = await store.create(patch("a", labels={"env": "prod"}))
    await store.create(patch("b", finalizers=["herder.dev/test"]))
    await store.create(patch("c", namespace="other"))
    assert await listed() == await held() and len(await held()) == 3
    a.metadata.labels = {"env": "dev"}
    a = await store.update(a)
    assert await listed() == await held()
    assert await listed(label_selector="env=prod") == []
    assert await listed(label_selector="env=dev") == [("a", a.metadata.resource_version)]
    await store.delete("cp", "b", "default")  # marked: its finalizer holds it
    assert await listed() == await held()
    b = await store.get("cp", "b", "default")
    b.metadata.finalizers = []
    await store.update(b)  # its last finalizer gone, it goes
    await store.delete("cp", "c", "other")
    assert await listed() == await held() == [("a", a.metadata.resource_version)]
    assert (await store.get("cp", "a", "default")).metadata.labels == {"env": "dev"}
