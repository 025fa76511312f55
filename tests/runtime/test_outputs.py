"""Declared outputs: a controller writes only what it declares, outputs are made one way and never taken
over, releases go through the owner's leave, conditions keep their transition time and tell changes."""

from __future__ import annotations

import pytest

from herder.resources import Resource
from herder.resources.backups import BackupsStatus
from herder.resources.clusters import ClusterStatus
from herder.runtime.clock import FakeClock
from herder.runtime.controller import Context, ObjectKey
from herder.runtime.outputs import (
    ANY_KIND,
    Owns,
    UndeclaredOutput,
    Writes,
    changed_fields,
    declarations_of,
)
from herder.state.errors import AlreadyExists, Forbidden
from herder.state.store import Store
from tests.state.conftest import patch

PATCH = "ConfigPatch"


def contexts(store: Store, **declared: tuple[object, ...]) -> dict[str, Context]:
    """Contexts of controllers declared side by side (as the manager runs them), by name."""
    owners = declarations_of((name, outputs) for name, outputs in declared.items())  # type: ignore[misc]
    return {name: Context(store, name, primary=PATCH, owners=owners) for name in declared}


def cluster(name: str) -> Resource:
    return Resource.model_validate(
        {
            "apiVersion": "herder.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"talosVersion": "v1.13.0", "kubernetesVersion": "1.33.0"},
        }
    )


async def test_a_write_outside_the_declaration_raises_naming_the_fields(store: Store) -> None:
    await store.create(patch("p", labels={"pool": "a"}))
    ctx = contexts(store, Labeller=(Writes(PATCH, "metadata.labels[pool]"),))["Labeller"]
    key = ObjectKey(PATCH, "default", "p")
    assert await ctx.mutate(key, lambda p: p.metadata.labels.update(pool="b"))
    with pytest.raises(UndeclaredOutput, match=r"controller Labeller changes metadata\.labels\[zone\]"):
        await ctx.mutate(key, lambda p: p.metadata.labels.update(zone="z"))
    with pytest.raises(UndeclaredOutput, match="creates ConfigPatch 'q'"):
        await ctx.create(patch("q"))
    with pytest.raises(UndeclaredOutput, match="deletes ConfigPatch 'p'"):
        await ctx.delete(key)
    assert (await store.get(PATCH, "p", "default")).metadata.labels == {"pool": "b"}


async def test_status_fields_are_declared_one_by_one_even_nested(store: Store) -> None:
    await store.create(cluster("alpha"))
    ctx = contexts(store, Requests=(Writes("Cluster", "status.backups.requested"),))["Requests"]
    key = ObjectKey("Cluster", "default", "alpha")

    def ask(_: Resource, status: ClusterStatus) -> None:
        assert status.backups is None
        status.backups = BackupsStatus(requested=1)

    updated = await ctx.mutate_status(key, ClusterStatus, ask)
    assert updated is not None and updated.status is not None
    assert updated.status["backups"]["requested"] == 1

    def also_fail(_: Resource, status: ClusterStatus) -> None:
        assert status.backups is not None
        status.backups.last_error = "disk full"

    with pytest.raises(UndeclaredOutput, match=r"status\.backups\.lastError"):
        await ctx.mutate_status(key, ClusterStatus, also_fail)


def test_changed_fields_name_leaves_conditions_by_type_and_keys() -> None:
    old = cluster("alpha").model_copy(
        update={
            "status": {
                "machines": {"total": 1, "ready": 0},
                "conditions": [{"type": "Ready", "status": "False"}],
            }
        }
    )
    new = old.clone()
    new.status = {
        "machines": {"total": 1, "ready": 1},
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "EtcdHealthy", "status": "True"}],
    }
    new.metadata.finalizers = ["herder.dev/cluster"]
    assert changed_fields(old, new) == {
        "status.machines.ready",
        "status.conditions[Ready]",
        "status.conditions[EtcdHealthy]",
        "metadata.finalizers[herder.dev/cluster]",
    }


def test_two_controllers_may_not_declare_one_status_field() -> None:
    with pytest.raises(ValueError, match=r"Cluster status\.rollouts \(B\) and status \(A\)"):
        declarations_of(
            [("A", (Writes("Cluster", "status"),)), ("B", (Writes("Cluster", "status.rollouts"),))]
        )
    # Metadata may have several writers: one sets a flag, another clears it.
    declarations_of(
        [
            ("A", (Writes("Machine", "metadata.annotations[herder.dev/force-release]"),)),
            ("B", (Writes("Machine", "metadata.annotations[herder.dev/force-release]"),)),
        ]
    )


async def test_outputs_are_marked_and_never_taken_over(store: Store) -> None:
    ctxs = contexts(store, Maker=(Owns(PATCH),), Other=(Owns(PATCH),))
    first, second = await store.create(patch("first")), await store.create(patch("second"))
    made = await ctxs["Maker"].apply_output(first, patch("out"))
    assert made.metadata.annotations["herder.dev/controller"] == "Maker"
    assert made.metadata.controller_ref() is not None
    # The same controller for another owner, or another controller, gets AlreadyExists.
    with pytest.raises(AlreadyExists):
        await ctxs["Maker"].apply_output(second, patch("out"))
    with pytest.raises(AlreadyExists):
        await ctxs["Other"].apply_output(first, patch("out"))
    # Nobody else may change it (the store refuses users and other controllers alike)...
    stored = await store.get(PATCH, "out", "default")
    stored.spec = {"data": "x: 1"}
    with pytest.raises(Forbidden, match="managed by controller Maker"):
        await store.update(stored, actor="serviceaccount:mallory")
    # ... nor delete it but through its owner's leave.
    with pytest.raises(UndeclaredOutput, match="neither owns nor declares"):
        await ctxs["Other"].delete(ObjectKey(PATCH, "default", "out"))
    assert await ctxs["Maker"].delete(ObjectKey(PATCH, "default", "out")) is not None


async def test_a_shared_output_stays_open_to_users(store: Store) -> None:
    owner = await store.create(patch("set"))
    ctx = contexts(store, Allocator=(Owns(PATCH, shared=True),))["Allocator"]
    made = await ctx.apply_output(owner, patch("node"))
    assert "herder.dev/controller" not in made.metadata.annotations
    assert ctx.own(made)
    made.spec = {"data": "locked: true"}
    assert await store.update(made, actor="serviceaccount:alice")


async def test_release_goes_through_the_owners_leave(store: Store) -> None:
    owner = await store.create(patch("set"))
    ctxs = contexts(
        store,
        Requests=(Owns(PATCH, releasable=True),),
        Sealed=(Owns("MachineRequestSet"),),
        Releaser=(Writes(PATCH, deletes=True),),
    )
    await ctxs["Requests"].apply_output(owner, patch("request"))
    with pytest.raises(UndeclaredOutput, match="another controller's output"):
        await ctxs["Releaser"].delete(ObjectKey(PATCH, "default", "request"))
    assert await ctxs["Releaser"].release(ObjectKey(PATCH, "default", "request")) is not None
    assert await ctxs["Releaser"].release(ObjectKey(PATCH, "default", "request")) is None  # gone already
    # An object nobody owns is released as a declared delete.
    await store.create(patch("loose"))
    assert await ctxs["Releaser"].release(ObjectKey(PATCH, "default", "loose")) is not None


async def test_the_garbage_collector_deletes_any_output(store: Store) -> None:
    owner = await store.create(patch("set"))
    ctxs = contexts(store, Maker=(Owns(PATCH),), Collector=(Writes(ANY_KIND, deletes=True),))
    await ctxs["Maker"].apply_output(owner, patch("out"))
    assert await ctxs["Collector"].delete(ObjectKey(PATCH, "default", "out")) is not None


async def test_an_owner_cannot_change_what_another_controller_declares_of_its_outputs(store: Store) -> None:
    owner = await store.create(patch("set"))
    ctxs = contexts(
        store, Maker=(Owns(PATCH),), Targeter=(Writes(PATCH, "metadata.labels[herder.dev/machine]"),)
    )
    await ctxs["Maker"].apply_output(owner, patch("out", labels={"pool": "a"}))
    key = ObjectKey(PATCH, "default", "out")
    assert await ctxs["Targeter"].mutate(
        key, lambda p: p.metadata.labels.update({"herder.dev/machine": "m1"})
    )
    with pytest.raises(UndeclaredOutput, match=r"metadata\.labels\[herder\.dev/machine\]"):
        await ctxs["Maker"].mutate(key, lambda p: p.metadata.labels.pop("herder.dev/machine"))
    assert await ctxs["Maker"].mutate(key, lambda p: p.metadata.labels.update(pool="b"))


async def test_a_condition_keeps_its_transition_time_and_tells_a_new_reason_once(store: Store) -> None:
    await store.create(cluster("alpha"))
    clock = FakeClock()
    owners = declarations_of([("Health", (Writes("Cluster", "status.conditions[Healthy]"),))])
    ctx = Context(store, "Health", primary="Cluster", owners=owners, clock=clock)
    alpha = await store.get("Cluster", "alpha", "default")

    async def told() -> list[str]:
        listed = await store.list("Event", "default")
        return sorted(
            f"{e.model_extra['reason']}:{e.model_extra['count']}" for e in listed.items if e.model_extra
        )

    async def condition() -> dict[str, str]:
        status = (await store.get("Cluster", "alpha", "default")).status or {}
        return next(c for c in status["conditions"] if c["type"] == "Healthy")

    await ctx.condition(alpha, "Healthy", False, "Unreachable", "no answer", event="Warning")
    first = (await condition())["lastTransitionTime"]
    clock.advance(60)
    await ctx.condition(alpha, "Healthy", False, "Unreachable", "still no answer", event="Warning")
    assert (await condition())["lastTransitionTime"] == first  # the same status: no transition
    assert await told() == ["Unreachable:1"]  # the same reason: told once
    await ctx.condition(alpha, "Healthy", True, "Reachable", "answers", event="Normal")
    assert (await condition())["lastTransitionTime"] == "2026-01-01T00:01:00Z"
    assert await told() == ["Reachable:1", "Unreachable:1"]
    with pytest.raises(UndeclaredOutput, match=r"status\.conditions\[Ready\]"):
        await ctx.condition(alpha, "Ready", True, "Ready")
