"""``sidero.link.ProvisionService/Provision``: a machine names itself and its WireGuard key and shows a join
token; herder answers with its WireGuard peer and the machine's tunnel address, records the machine's
SideroLink (from which herder makes its Machine) and adds the machine as a peer.

A bad, revoked or expired token is refused with PERMISSION_DENIED, and every answer is audited. A machine's
address is kept across rejoins (a reboot, a new WireGuard key); a second machine claiming a UUID another
holds replaces the first one's key, as Talos machines are expected to report unique UUIDs (herder refuses
the all-zero UUID that a machine without SMBIOS reports).
"""

from __future__ import annotations

import ipaddress
import logging
import uuid as uuidlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import grpc

from herder.api.audit import AuditLog
from herder.krm.policy import Access, Identity
from herder.resources import Resource
from herder.resources.join import JOIN_TOKEN, SIDERO_LINK, JoinTokenStatus, SideroLinkSpec
from herder.siderolink import tokens
from herder.siderolink.addresses import node_address
from herder.siderolink.records import mutate, mutate_status
from herder.state.errors import AlreadyExists, NotFound
from herder.state.store import SYSTEM, Store
from herder.talos.api.siderolink import provision_pb2 as pb
from herder.talos.api.siderolink import provision_pb2_grpc as pb_grpc
from herder.talos.siderolink.rejoin import KEY_PURPOSE, admits, is_rejoin_token
from herder.talos.siderolink.wireguard import valid_key

log = logging.getLogger("herder.siderolink")

NAMESPACE = "default"
"""Where joined machines' SideroLinks and Machines live."""
USER_AGENT = "siderolink"


@dataclass(frozen=True)
class Tunnel:
    """herder's end of the tunnel, as Provision answers it."""

    public_key: str
    endpoints: tuple[str, ...]
    prefix: ipaddress.IPv6Network
    server_address: ipaddress.IPv6Interface


PeerAdder = Callable[[str, str, str, str | None], Awaitable[None]]
"""Adds (machine UUID, public key, node address, the key it replaces or None) to herder's WireGuard
interface."""


class BadRequest(ValueError):
    pass


def _uuid(text: str) -> str:
    try:
        value = uuidlib.UUID(text)
    except ValueError:
        raise BadRequest(f"node_uuid {text!r}: not a UUID") from None
    if value.int == 0:
        raise BadRequest("node_uuid is all zeros: herder tells machines apart by their SMBIOS UUID")
    return str(value)


class ProvisionService(pb_grpc.ProvisionServiceServicer):
    def __init__(self, store: Store, audit: AuditLog, tunnel: Tunnel, add_peer: PeerAdder) -> None:
        self._store = store
        self._audit = audit
        self._tunnel = tunnel
        self._add_peer = add_peer

    async def Provision(
        self, request: pb.ProvisionRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.ProvisionResponse:
        source = context.peer()
        try:
            node = _uuid(request.node_uuid)
            if not valid_key(request.node_public_key):
                raise BadRequest("node_public_key: not a WireGuard public key (32 bytes, base64)")
            if request.wireguard_over_grpc:
                raise BadRequest(
                    "wireguard_over_grpc: herder carries WireGuard over UDP only (drop siderolink's "
                    "tunnel setting and open the WireGuard port)"
                )
        except BadRequest as exc:
            await self._record(None, request.node_uuid, source, 400, str(exc))
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise
        try:
            admitted = await self._admit(node, request.join_token)
        except tokens.Refused as exc:
            await self._record(None, node, source, 403, f"join refused: {exc}")
            log.warning("machine %s from %s: join refused (%s)", node, source, exc)
            # The caller learns only that it may not join: which tokens exist is not its business.
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "the join token is not valid")
            raise
        address, replaced = await self._link(node, request, admitted)
        await self._add_peer(node, request.node_public_key, str(address.ip), replaced)
        if admitted.join_token:
            await self._used(admitted.join_token, node)
        how = f"token {admitted.by}" + (", rejoined with its own token" if admitted.rejoined else "")
        await self._record(admitted, node, source, 200, f"joined as {address.ip} ({how})")
        log.info("machine %s joined from %s as %s (%s)", node, source, address.ip, how)
        return pb.ProvisionResponse(
            server_endpoint=list(self._tunnel.endpoints),
            server_public_key=self._tunnel.public_key,
            node_address_prefix=str(address),
            server_address=str(self._tunnel.server_address.ip),
        )

    async def _admit(self, node: str, token: str) -> tokens.Admitted:
        """What lets the machine in: a join token, or its own rejoin token while its SideroLink exists (what
        it first joined with stays what let it in)."""
        if not is_rejoin_token(token):
            return await tokens.admit(self._store, token)
        key = self._store.derived_key(KEY_PURPOSE)
        if key is None or not admits(key, token, node):
            raise tokens.Refused("not this machine's rejoin token")
        try:
            link = await self._store.get(SIDERO_LINK, node, NAMESPACE)
        except NotFound:
            raise tokens.Refused("a rejoin token of a machine whose SideroLink is gone") from None
        return tokens.Admitted(by=SIDERO_LINK.spec_of(link, SideroLinkSpec).join_token, rejoined=True)

    async def _link(
        self, node: str, request: pb.ProvisionRequest, admitted: tokens.Admitted
    ) -> tuple[ipaddress.IPv6Interface, str | None]:
        """The machine's SideroLink made or updated; its address, and the key its new one replaces."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        while True:
            try:
                current = await self._store.get(SIDERO_LINK, node, NAMESPACE)
            except NotFound:
                current = None
            if current is not None:
                spec = SIDERO_LINK.spec_of(current, SideroLinkSpec)
                address = ipaddress.IPv6Interface(spec.node_address)
                replaced = spec.node_public_key if spec.node_public_key != request.node_public_key else None

                def point(obj: Resource) -> None:
                    obj.spec = {
                        **(obj.spec or {}),
                        "nodePublicKey": request.node_public_key,
                        "joinToken": admitted.by,
                        "talosVersion": request.talos_version,
                    }

                updated = await mutate(self._store, SIDERO_LINK, node, NAMESPACE, point)
                if updated is None:
                    continue  # deleted meanwhile: made afresh
                break
            taken = {
                ipaddress.IPv6Interface(SIDERO_LINK.spec_of(link, SideroLinkSpec).node_address).ip
                for link in (await self._store.list(SIDERO_LINK, NAMESPACE)).items
            }
            address, replaced = node_address(self._tunnel.prefix, node, taken), None
            try:
                updated = await self._store.create(
                    Resource.model_validate(
                        {
                            "apiVersion": SIDERO_LINK.api_version,
                            "kind": SIDERO_LINK.kind,
                            "metadata": {"name": node, "namespace": NAMESPACE},
                            "spec": {
                                "nodePublicKey": request.node_public_key,
                                "nodeAddress": str(address),
                                "joinToken": admitted.by,
                                "talosVersion": request.talos_version,
                            },
                        }
                    ),
                    actor=SYSTEM,
                )
                break
            except AlreadyExists:
                continue  # the same machine twice at once: the second updates what the first made

        def joined(status: dict[str, object]) -> None:
            status["joinedAt"] = now

        await mutate_status(self._store, SIDERO_LINK, node, NAMESPACE, joined)
        return address, replaced

    async def _used(self, name: str, node: str) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

        def count(status: dict[str, object]) -> None:
            current = JoinTokenStatus.model_validate(status)
            status.update(
                JoinTokenStatus(joins=current.joins + 1, lastUsed=now, lastMachine=node).model_dump(
                    by_alias=True
                )
            )

        await mutate_status(self._store, JOIN_TOKEN, name, None, count)

    async def _record(
        self, admitted: tokens.Admitted | None, node: str, source: str, code: int, message: str
    ) -> None:
        who = Identity(name=f"machine:{node}" if node else "machine:unknown", role="None")
        if admitted is not None:
            who = Identity(name=f"machine:{node}", role="None", labels={"herder.dev/join-token": admitted.by})
        await self._audit.record(
            who,
            Access("create", SIDERO_LINK, NAMESPACE, node or None),
            method="POST",
            source=source,
            user_agent=USER_AGENT,
            code=code,
            message=f"/sidero.link.ProvisionService/Provision: {message}",
            always=True,
        )
