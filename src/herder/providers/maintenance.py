"""What a provider asks of a machine it made before it reports it: the UUID it answers with in maintenance
mode (``SystemInformation``, read without a client certificate, as herder's own registration reads it).
herder reaches machines at the address their provider reports: the provider waits until the machine
answers there, so that the request is Provisioned only once herder can take the machine."""

from __future__ import annotations

from herder.infra import Retry
from herder.talos.machine import MachineAPIError, MachineClient, Unauthenticated

TALOS_PORT = 50000


def endpoint_of(address: str, port: int = TALOS_PORT) -> str:
    """``IP:PORT`` of an address given as ``IP`` or ``IP:PORT`` (``[v6]:PORT`` for IPv6)."""
    if address.startswith("["):
        return address if "]:" in address else f"{address}:{port}"
    if address.count(":") == 1:
        return address
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


async def maintenance_uuid(address: str, *, waiting_for: str, timeout: float = 5.0) -> str:
    """The UUID the machine at ``address`` reports in maintenance mode; ``Retry`` (naming what is awaited)
    while it does not answer there yet."""
    endpoint = endpoint_of(address)
    try:
        async with MachineClient.insecure(
            endpoint, timeout=timeout, connect_timeout=timeout, retries=0
        ) as client:
            uuid = (await client.system_information()).uuid.lower()
    except Unauthenticated:
        raise Retry(
            f"{waiting_for}: Talos at {endpoint} answers only to a client certificate (it runs a config "
            "already, not maintenance mode)",
            after=5.0,
        ) from None
    except MachineAPIError as exc:
        raise Retry(f"{waiting_for}: Talos does not answer at {endpoint} yet ({exc})", after=1.0) from None
    if not uuid:
        raise Retry(f"{waiting_for}: Talos at {endpoint} reports no machine UUID yet", after=1.0)
    return uuid
