"""ManagedControlPlaneReplacement's decisions: a managed control plane unreachable (or its etcd member
unhealthy) for long enough is replaced, one at a time, and only while the others are up and etcd keeps
a quorum."""

from __future__ import annotations

from herder.controllers.managed.replacement import ManagedReplacementController
from herder.resources import Resource
from herder.runtime.controller import ObjectKey, Result
from tests.controllers.managed import HIDDEN, managed_site
from tests.controllers.provisioned import TALOS, reported, request
from tests.controllers.site import Site, obj

AFTER = 300.0
SET = "herder-alpha-control-planes"
MACHINES = ("m1", "m2", "m3")


def _connected(ok: bool, since: str) -> dict[str, str]:
    return {
        "type": "Connected",
        "status": "True" if ok else "False",
        "reason": "Connected" if ok else "Unreachable",
        "message": "",
        "lastTransitionTime": since,
    }


async def _control_planes(site: Site) -> Resource:
    """A managed cluster of three control planes, all up, and etcd healthy."""
    cluster = await managed_site(site, size="s")
    labels = {"herder.dev/cluster": "alpha", "herder.dev/machine-set": "alpha-control-planes"}
    for uuid in MACHINES:
        (made,) = await site.create(
            request(
                f"{SET}-{uuid}",
                HIDDEN,
                labels={"herder.dev/machine-request-set": SET, "herder.dev/hidden": "true"},
            )
        )
        await reported(site, made, uuid, "127.0.0.2")
        (machine,) = await site.create(
            obj(
                "Machine",
                uuid,
                spec={"endpoint": "127.0.0.2:50000"},
                metadata={
                    "labels": {**labels, "herder.dev/machine-request-set": SET},
                    "finalizers": ["herder.dev/machine-request"],
                },
            )
        )
        await site.set_status(machine, connected=True, conditions=[_connected(True, site.clock.rfc3339())])
        (member,) = await site.create(
            obj(
                "ClusterMachine",
                uuid,
                spec={"role": "controlplane", "talosVersion": TALOS, "kubernetesVersion": "1.33.0"},
                metadata={"labels": labels},
            )
        )
        await site.set_status(member, ready=True)
    (health,) = await site.create(obj("ControlPlaneStatus", "alpha"))
    await _etcd(site, health, unhealthy=())
    return cluster


async def _etcd(site: Site, health: Resource, *, unhealthy: tuple[str, ...], quorum: bool = True) -> None:
    members = [{"machine": m, "id": f"{i:x}", "healthy": m not in unhealthy} for i, m in enumerate(MACHINES)]
    await site.set_status(health, etcd={"members": members, "quorum": quorum})


async def _unreachable(site: Site, uuid: str) -> None:
    machine = await site.get("Machine", uuid)
    assert machine is not None
    await site.set_status(machine, connected=False, conditions=[_connected(False, site.clock.rfc3339())])


async def _leaving(site: Site) -> list[str]:
    listed = (await site.store.list("Machine", "default")).items
    return sorted(m.name for m in listed if m.metadata.deletion_timestamp)


async def test_a_control_plane_unreachable_long_enough_is_replaced(site: Site) -> None:
    controller = ManagedReplacementController(AFTER)
    cluster = await _control_planes(site)
    assert await site.reconcile(controller, ObjectKey.of(cluster)) is None  # all up: nothing to wait for
    await _unreachable(site, "m2")
    site.clock.advance(100)
    assert await site.reconcile(controller, ObjectKey.of(cluster)) == Result(requeue_after=AFTER - 100 + 1)
    assert await _leaving(site) == []
    site.clock.advance(AFTER)
    assert await site.reconcile(controller, ObjectKey.of(cluster)) is None
    assert await _leaving(site) == ["m2"]
    told = [e for e in await site.told(cluster) if e[1] == "ReplacingControlPlane"]
    assert told == [
        ("Warning", "ReplacingControlPlane", "control plane machine m2 unreachable for 400 s: it is replaced")
    ]
    # Its replacement comes first: nothing else is replaced while m2 is leaving.
    await _unreachable(site, "m3")
    site.clock.advance(AFTER + 1)
    assert await site.reconcile(controller, ObjectKey.of(cluster)) == Result(requeue_after=5.0)
    assert await _leaving(site) == ["m2"]


async def test_no_replacement_while_another_control_plane_is_down_or_etcd_has_no_quorum(site: Site) -> None:
    controller = ManagedReplacementController(AFTER)
    cluster = await _control_planes(site)
    await _unreachable(site, "m1")
    member = await site.get("ClusterMachine", "m3")
    assert member is not None
    await site.set_status(member, ready=False)
    site.clock.advance(AFTER + 1)
    assert await site.reconcile(controller, ObjectKey.of(cluster)) == Result(requeue_after=5.0)
    await site.set_status(member, ready=True)
    health = await site.get("ControlPlaneStatus", "alpha")
    assert health is not None
    await _etcd(site, health, unhealthy=(), quorum=False)
    assert await site.reconcile(controller, ObjectKey.of(cluster)) == Result(requeue_after=5.0)
    assert await _leaving(site) == []
    await _etcd(site, health, unhealthy=())
    assert await site.reconcile(controller, ObjectKey.of(cluster)) is None
    assert await _leaving(site) == ["m1"]


async def test_a_connected_control_plane_whose_etcd_member_stays_unhealthy_is_replaced(site: Site) -> None:
    controller = ManagedReplacementController(AFTER)
    cluster = await _control_planes(site)
    health = await site.get("ControlPlaneStatus", "alpha")
    assert health is not None
    await _etcd(site, health, unhealthy=("m3",))
    # Unhealthy since this process first saw it.
    assert await site.reconcile(controller, ObjectKey.of(cluster)) == Result(requeue_after=AFTER + 1)
    site.clock.advance(AFTER)
    assert await site.reconcile(controller, ObjectKey.of(cluster)) is None
    assert await _leaving(site) == ["m3"]
