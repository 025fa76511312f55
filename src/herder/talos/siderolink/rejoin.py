"""Rejoin tokens: what herder writes into the config of a machine that joined with a JoinToken, so that the
installed system joins again at every boot and after an upgrade without the kernel arguments it first
booted with.

herder keeps only the digest of a JoinToken, so it cannot write that token into a config. A rejoin token is
the machine's own instead: ``hjr_`` and the HMAC-SHA256 of its UUID under a key herder derives from its
store's encryption key (replicas share it). It lets in that machine only, and only while its SideroLink
exists: deleting the SideroLink (or the machine leaving herder) ends it, and the machine must join with a
join token again. Revoking the JoinToken it first joined with stops new machines, not the ones herder
manages already.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass

from herder.talos.siderolink.kernel_args import JoinArgs, join_args

PREFIX = "hjr_"
KEY_PURPOSE = "herder siderolink rejoin tokens v1"
"""What the key is derived for (``Store.derived_key``): no other use of the encryption key shares it."""


def rejoin_token(key: bytes, uuid: str) -> str:
    mac = hmac.new(key, uuid.strip().lower().encode(), hashlib.sha256).digest()
    return PREFIX + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def is_rejoin_token(token: str) -> bool:
    return token.startswith(PREFIX)


def admits(key: bytes, token: str, uuid: str) -> bool:
    """Whether ``token`` is the rejoin token of the machine ``uuid``."""
    return hmac.compare_digest(token.encode(), rejoin_token(key, uuid).encode())


@dataclass(frozen=True)
class Rejoin:
    """What a joined machine's config says to join again: herder's Provision API, the machine's rejoin
    token, and herder's address in the tunnel (for its events and kernel log)."""

    key: bytes
    api: str
    server_address: str

    def args_for(self, uuid: str) -> JoinArgs:
        return join_args(self.api, rejoin_token(self.key, uuid), self.server_address)
