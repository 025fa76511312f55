"""Addresses in the tunnel: the server's (the prefix's first, ``::1``, as Omni's) and one per machine,
drawn from its UUID so that a machine rejoining after its link was lost gets the same one, and never one
another machine holds."""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Collection

DEFAULT_PREFIX = "fdae:41e4:649b:9303::/64"
"""Omni's default SideroLink prefix."""


def parse_prefix(text: str) -> ipaddress.IPv6Network:
    """An IPv6 prefix of at most /120 (room for machines); ``ValueError`` saying why not."""
    try:
        network = ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise ValueError(f"--siderolink-prefix {text!r}: {exc}") from None
    if not isinstance(network, ipaddress.IPv6Network) or network.prefixlen > 120:
        raise ValueError(
            f"--siderolink-prefix {text!r}: an IPv6 prefix of /120 or shorter, e.g. {DEFAULT_PREFIX}"
        )
    return network


def server_address(prefix: ipaddress.IPv6Network) -> ipaddress.IPv6Interface:
    return ipaddress.IPv6Interface(f"{prefix.network_address + 1}/{prefix.prefixlen}")


def node_address(
    prefix: ipaddress.IPv6Network, uuid: str, taken: Collection[ipaddress.IPv6Address]
) -> ipaddress.IPv6Interface:
    """The address of machine ``uuid``: from a digest of its UUID, the next free one when that is taken."""
    hosts = prefix.num_addresses
    start = int.from_bytes(hashlib.sha256(uuid.encode()).digest()[:16]) % hosts
    reserved = {prefix.network_address, prefix.network_address + 1, prefix.broadcast_address}
    for step in range(hosts):
        address = prefix.network_address + (start + step) % hosts
        if address not in reserved and address not in taken:
            return ipaddress.IPv6Interface(f"{address}/{prefix.prefixlen}")
    raise ValueError(f"no free address left in {prefix}")
