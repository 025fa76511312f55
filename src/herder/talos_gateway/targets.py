"""The machines a call goes to: each node the caller named (``node`` or ``nodes`` metadata, an IP address,
a hostname or a machine's UUID), found among the Machines of the caller's cluster.

A node of another cluster, an unknown one and, below Support, a hidden machine are not found, all with
the same words, so that nothing tells them apart; a machine the platform manages (``herder.dev/read-only``:
a managed control plane) is refused to every role below Support.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from herder.resources import Resource
from herder.resources.access import HIDDEN_LABEL, READ_ONLY_ANNOTATION
from herder.resources.machines import CLUSTER_LABEL, MACHINE, MachineSpec, MachineStatus
from herder.state.store import Store
from herder.talos.machine import split_endpoint
from herder.talos_gateway.callers import Caller, Refused


@dataclass(frozen=True)
class Target:
    node: str
    """As the caller named it (what apid writes into each reply's metadata)."""
    machine: Resource | None = None
    refused: Refused | None = None

    @property
    def hidden(self) -> bool:
        return self.machine is not None and HIDDEN_LABEL in self.machine.metadata.labels


def _names(machine: Resource) -> set[str]:
    """What a caller may name a machine by: its UUID, its endpoint's host, its addresses, its hostname."""
    status = MachineStatus.model_validate(machine.status or {})
    names = {machine.name, *status.addresses, status.hostname}
    endpoint = MACHINE.spec_of(machine, MachineSpec).endpoint
    if endpoint:
        names.add(split_endpoint(endpoint)[0])
    return names - {""}


async def find(store: Store, caller: Caller, nodes: list[str]) -> list[Target]:
    machines: list[Resource] = []
    if caller.cluster is not None:
        listed = await store.list(
            MACHINE, caller.cluster.namespace, label_selector=f"{CLUSTER_LABEL}={caller.cluster.name}"
        )
        machines = [m for m in listed.items if caller.sees_hidden or HIDDEN_LABEL not in m.metadata.labels]
    by_name = {name: m for m in machines for name in _names(m)}
    targets = []
    for node in nodes:
        machine = by_name.get(node)
        if machine is None:
            refused = Refused(
                grpc.StatusCode.NOT_FOUND, f'node "{node}" is not a machine of cluster {caller.bound.name}'
            )
            targets.append(Target(node, refused=refused))
        elif READ_ONLY_ANNOTATION in machine.metadata.annotations and not caller.sees_hidden:
            refused = Refused(
                grpc.StatusCode.PERMISSION_DENIED,
                f'node "{node}" is managed by the platform: its Talos API is open to platform staff only',
            )
            targets.append(Target(node, machine, refused))
        else:
            targets.append(Target(node, machine))
    return targets
