"""The methods the gateway relays: the Talos machine API (``machine.MachineService``) and the resource API
(``cosi.resource.State``) that herder speaks, each with the shape of its messages, read from the protos.

The gateway relays raw messages and never decodes them; what it needs of a method is whether its requests
and its replies stream, and whether apid fans it out to several nodes (``nodes`` metadata): the machine
API yes, the resource API no.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from herder.talos.api.cosi import state_pb2
from herder.talos.api.machine import machine_pb2
from herder.talos.machine import roles

# The services apid proxies one-to-many; of Talos's others (cluster, inspect, storage, time) herder
# speaks none.
_ONE_TO_MANY = frozenset({roles.SERVICE})


@dataclass(frozen=True)
class Method:
    service: str
    """``machine.MachineService``."""
    path: str
    """The full gRPC name: ``/machine.MachineService/Version``."""
    name: str
    """``Version``."""
    client_streaming: bool
    server_streaming: bool
    one_to_many: bool


def _methods(module: Any, service: str) -> list[Method]:
    descriptor = module.DESCRIPTOR.services_by_name[service]
    return [
        Method(
            service=descriptor.full_name,
            path=f"/{descriptor.full_name}/{m.name}",
            name=m.name,
            client_streaming=m.client_streaming,
            server_streaming=m.server_streaming,
            one_to_many=descriptor.full_name in _ONE_TO_MANY,
        )
        for m in descriptor.methods
    ]


METHODS: dict[str, Method] = {
    m.path: m for m in [*_methods(machine_pb2, "MachineService"), *_methods(state_pb2, "State")]
}
