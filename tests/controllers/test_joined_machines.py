"""JoinedMachine's decisions: a machine that joined over SideroLink becomes the Machine of its UUID at its
tunnel address, and a Machine known before (registered, or a provider's) is adopted: its endpoint moves to
the tunnel, what else it holds stays."""

from __future__ import annotations

from herder.controllers.clusters.joined_machines import JoinedMachineController
from herder.runtime.controller import ObjectKey
from tests.controllers.site import Site, obj

UUID = "5b1c7e1a-90d4-4c1e-8b61-0d7f5c3a2e11"
KEY = ObjectKey("SideroLink", "default", UUID)


def link(address: str = "fdae:41e4:649b:9303::2a/64") -> object:
    return obj("SideroLink", UUID, spec={"nodePublicKey": "k" * 43 + "=", "nodeAddress": address})


async def test_a_joined_machine_is_the_machine_of_its_uuid_at_its_tunnel_address(site: Site) -> None:
    await site.create(link())  # type: ignore[arg-type]
    await site.reconcile(JoinedMachineController(), KEY)
    machine = await site.get("Machine", UUID)
    assert machine is not None and machine.spec == {"endpoint": "[fdae:41e4:649b:9303::2a]:50000"}
    made = await site.get("SideroLink", UUID)
    assert await site.told(made) == [
        ("Normal", "Joined", f"machine {UUID} is reached at [fdae:41e4:649b:9303::2a]:50000")
    ]
    # Nothing to do the second time.
    await site.reconcile(JoinedMachineController(), KEY)
    assert len(await site.told(made)) == 1


async def test_a_known_machine_is_adopted_keeping_what_else_it_holds(site: Site) -> None:
    await site.create(
        obj("Machine", UUID, spec={"endpoint": "10.5.0.2:50000"}, metadata={"labels": {"pool": "a"}})
    )
    await site.create(link())  # type: ignore[arg-type]
    await site.reconcile(JoinedMachineController(), KEY)
    machine = await site.get("Machine", UUID)
    assert machine is not None
    assert machine.spec == {"endpoint": "[fdae:41e4:649b:9303::2a]:50000"}
    assert machine.metadata.labels == {"pool": "a"}
    made = await site.get("SideroLink", UUID)
    (told,) = await site.told(made)
    assert told[1] == "Adopted"


async def test_a_deleted_link_leaves_the_machine(site: Site) -> None:
    await site.create(obj("Machine", UUID, spec={"endpoint": "10.5.0.2:50000"}))
    assert await site.reconcile(JoinedMachineController(), KEY) is None
    machine = await site.get("Machine", UUID)
    assert machine is not None and machine.spec == {"endpoint": "10.5.0.2:50000"}
