"""Machines that join herder over SideroLink: the tokens that let them (JoinToken) and the WireGuard link
each joined machine keeps with herder (SideroLink).

A machine booted with ``siderolink.api=…?jointoken=TOKEN`` calls herder's Provision API with its UUID and
WireGuard key; a valid token gets it an address in the tunnel and herder as its WireGuard peer. herder keeps
one SideroLink per machine UUID (the same address at every rejoin) and reaches the machine's Talos API at
that address, through the tunnel only.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from herder.resources.configuration import GROUP, VERSION
from herder.resources.registry import KindInfo, PrinterColumn
from herder.resources.status import WithConditions, condition_column, condition_reason_column

_STRICT = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

JOIN_TOKEN_PREFIX = "hjt"
"""A join token reads ``hjt_<name>_<secret>``: ``name`` is its JoinToken, ``secret`` 32 random bytes in hex."""


class JoinTokenSpec(BaseModel):
    model_config = _STRICT

    description: str = ""
    digest: str = Field(
        pattern=r"^[0-9a-f]{64}$",
        description="SHA-256 of the token's secret, in hex (herder jointoken create makes the token and "
        "keeps only this)",
    )
    expires_at: str | None = Field(
        default=None,
        alias="expiresAt",
        pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$",
        description="when the token stops letting machines join (RFC 3339, UTC); none: never",
    )
    revoked: bool = Field(default=False, description="a revoked token lets no machine join any more")


class JoinTokenStatus(BaseModel):
    model_config = _STRICT

    joins: int = Field(default=0, description="how many times a machine joined with it")
    last_used: str = Field(default="", alias="lastUsed", description="when a machine last joined with it")
    last_machine: str = Field(default="", alias="lastMachine", description="the UUID of that machine")


JOIN_TOKEN = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="JoinToken",
    plural="jointokens",
    namespaced=False,
    spec_model=JoinTokenSpec,
    status_model=JoinTokenStatus,
    sensitive=True,
    categories=("herder",),
    printer_columns=(
        PrinterColumn("Revoked", ".spec.revoked", type="boolean"),
        PrinterColumn("Expires", ".spec.expiresAt"),
        PrinterColumn("Joins", ".status.joins", type="integer"),
        PrinterColumn("Last-Used", ".status.lastUsed"),
        PrinterColumn("Description", ".spec.description", priority=1),
    ),
    description="A token that lets machines join herder over SideroLink (siderolink.api=…?jointoken=).",
)


class SideroLinkSpec(BaseModel):
    model_config = _STRICT

    node_public_key: str = Field(alias="nodePublicKey", description="the machine's WireGuard public key")
    node_address: str = Field(
        alias="nodeAddress",
        description="the machine's address in the tunnel, with the tunnel's prefix length",
    )
    join_token: str = Field(
        default="", alias="joinToken", description="what let it join: a JoinToken, or provider/ID"
    )
    talos_version: str = Field(default="", alias="talosVersion", description="as the machine told at join")


class SideroLinkStatus(WithConditions):
    model_config = _STRICT

    last_handshake: str = Field(
        default="", alias="lastHandshake", description="the last WireGuard handshake with the machine"
    )
    peer_endpoint: str = Field(
        default="", alias="peerEndpoint", description="where the machine's WireGuard packets come from"
    )
    joined_at: str = Field(default="", alias="joinedAt", description="when the machine last called Provision")
    events: int = Field(default=0, description="events the machine sent to herder's events sink")
    last_event: str = Field(default="", alias="lastEvent", description="the type of the last one")
    last_event_at: str = Field(default="", alias="lastEventAt")
    kernel_log_lines: int = Field(
        default=0,
        alias="kernelLogLines",
        description="kernel log lines received (kept in the data directory)",
    )
    conditions: list[dict[str, Any]] = []


SIDERO_LINK = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="SideroLink",
    plural="siderolinks",
    spec_model=SideroLinkSpec,
    status_model=SideroLinkStatus,
    short_names=("link",),
    categories=("herder",),
    printer_columns=(
        PrinterColumn("Address", ".spec.nodeAddress"),
        condition_column("Connected"),
        PrinterColumn("Last-Handshake", ".status.lastHandshake"),
        PrinterColumn("Token", ".spec.joinToken", priority=1),
        condition_reason_column("Connected", "Message"),
    ),
    description="The WireGuard link of one machine that joined over SideroLink (named by its UUID).",
)

JOIN_KINDS = (JOIN_TOKEN, SIDERO_LINK)
