"""What herder learns about a machine over the Talos resource API, as ``talosctl get`` learns it: its
hardware (processors, memory, disks), its addresses and its hostname, read once per connection."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from herder.talos.machine import MachineAPIError, MachineClient


async def read_facts(client: MachineClient) -> dict[str, Any]:
    """``hardware``, ``addresses`` and ``hostname`` for a Machine's status; what a machine does not answer is
    left out."""
    facts: dict[str, Any] = {}
    try:
        # Asked together: a machine that answers slowly keeps its link waiting once, not four times.
        info, processors, memory, disks = await asyncio.gather(
            client.system_information(), client.processors(), client.memory_modules(), client.disks()
        )
    except MachineAPIError:
        return facts
    facts["hardware"] = {
        "cpus": sum(p.thread_count or p.core_count for p in processors),
        "memoryMiB": sum(m.size for m in memory),
        "disks": [
            {
                "name": d.dev_path,
                "size": d.size,
                "model": d.model,
                "serial": d.serial,
                "transport": d.transport,
            }
            for d in disks
            if not d.readonly and not d.cdrom
        ],
        "manufacturer": info.manufacturer,
        "product": info.product_name,
    }
    try:
        addresses = await client.node_addresses("current")
    except MachineAPIError:
        return facts
    facts["addresses"] = [a.split("/")[0] for a in addresses.addresses]
    with contextlib.suppress(MachineAPIError):
        facts["hostname"] = (await client.hostname_status()).hostname
    return facts
