"""Joined machines: a machine that joined over SideroLink is the Machine of its UUID, reached at its
address in the tunnel (port 50000, apid's), so that everything herder does over the Talos API goes through
the tunnel. A Machine that exists already (registered by hand, or reported by a provider) is adopted: its
endpoint moves to the tunnel. Deleting the link leaves the Machine (herder only stops reaching it).
"""

from __future__ import annotations

import ipaddress

from herder.resources import Resource
from herder.resources.join import SIDERO_LINK, SideroLinkSpec
from herder.resources.machines import DEFAULT_TALOS_PORT, MACHINE, MachineSpec
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch
from herder.runtime.outputs import Writes
from herder.state.errors import AlreadyExists


def tunnel_endpoint(link: Resource) -> str:
    """apid of the joined machine, at its tunnel address."""
    address = ipaddress.IPv6Interface(SIDERO_LINK.spec_of(link, SideroLinkSpec).node_address).ip
    return f"[{address}]:{DEFAULT_TALOS_PORT}"


class JoinedMachineController(Controller):
    name = "JoinedMachine"
    primary = SIDERO_LINK.kind
    outputs = (Writes(MACHINE.kind, "spec.endpoint", creates=True),)
    watches = (Watch(SIDERO_LINK.kind),)

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        link = await ctx.get(key)
        if link is None or link.metadata.deletion_timestamp:
            return None
        endpoint = tunnel_endpoint(link)
        machine_key = ObjectKey(MACHINE.kind, key.namespace, key.name)
        machine = await ctx.get(machine_key)
        if machine is not None and MACHINE.spec_of(machine, MachineSpec).endpoint == endpoint:
            return None
        if machine is None:
            try:
                await ctx.create(
                    Resource.model_validate(
                        {
                            "apiVersion": MACHINE.api_version,
                            "kind": MACHINE.kind,
                            "metadata": {"name": key.name, "namespace": key.namespace},
                            "spec": {"endpoint": endpoint},
                        }
                    )
                )
                await ctx.event(link, "Normal", "Joined", f"machine {key.name} is reached at {endpoint}")
                return None
            except AlreadyExists:
                pass

        def point(obj: Resource) -> None:
            obj.spec = {**(obj.spec or {}), "endpoint": endpoint}

        await ctx.mutate(machine_key, point)
        await ctx.event(link, "Normal", "Adopted", f"machine {key.name} is reached at {endpoint} from now on")
        return None
