"""How a call to an emulated machine's Talos API finds its way, as apid routes it: attributed to the
machine the caller dialled and the roles of the caller's certificate (see ``network``), authorized as
machined does, then sent to that machine, to the one the ``node`` metadata names (one-to-one), or to each
of ``nodes`` (one-to-many). Shared by the machine API (``service``) and the resource API
(``resource_service``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeAlias

import grpc

from herder.emu.errors import ApiError, not_authorized
from herder.emu.machine.config import MachineConfig
from herder.emu.machine.lifecycle import Machine
from herder.emu.machine.network import Network, Peer
from herder.talos.machine import roles

Route: TypeAlias = Machine | ApiError

Context = Any  # grpc.aio.ServicerContext (grpc ships no type information)


class Fleet(Protocol):
    """The machines the Talos API answers for (the emulator provides them)."""

    @property
    def network(self) -> Network: ...

    @property
    def machines(self) -> Mapping[str, Machine]: ...

    def find(self, ref: str) -> Machine | None:
        """A machine by uuid, address, endpoint or hostname."""
        ...


class Router:
    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    async def caller(self, method: str, context: Context) -> tuple[Peer, Machine]:
        """Who calls (``method``: the full gRPC name) and through which machine; aborts the call if the
        connection no longer leads anywhere or the caller's roles do not allow the method."""
        peer = self.fleet.network.peers.get(context.peer())
        machine = self.fleet.machines.get(peer.machine) if peer is not None else None
        if peer is None or machine is None:
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED, "call did not come through a machine's API endpoint"
            )
            raise AssertionError("unreachable")
        if not self.fleet.network.serving(machine.uuid):
            # A connection still open while its machine reboots or powers off: nothing answers any more.
            await context.abort(grpc.StatusCode.UNAVAILABLE, "connection closed: the machine is down")
        if machine.api_secure and not peer.authenticated:
            # A connection of the maintenance service, still open while apid restarts with mutual TLS.
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the maintenance service is shutting down")
        if not roles.allowed(method, peer.roles):
            error = not_authorized()
            await context.abort(error.code, error.message)
        return peer, machine

    async def targets(self, entry: Machine, context: Context) -> tuple[list[tuple[str, Route]], bool]:
        """The machines a call goes to, each with the name the caller used (or why it cannot be reached),
        and whether replies are aggregated (``nodes``) rather than one-to-one (``node`` or none)."""
        metadata = context.invocation_metadata() or ()
        node = [str(v) for k, v in metadata if k == "node"]
        nodes = [n.strip() for k, v in metadata if k == "nodes" for n in str(v).split(",") if n.strip()]
        if any(k == "proxyfrom" for k, _v in metadata):
            return [(entry.address, entry)], False
        if len(node) > 1:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "node metadata must be single-valued")
        if nodes and not (len(nodes) == 1 and entry.answers_to(nodes[0])):
            return [(n, self.route(entry, n)) for n in nodes], True
        if node and not entry.answers_to(node[0]):
            return [(node[0], self.route(entry, node[0]))], False
        return [(entry.address, entry)], False

    def route(self, entry: Machine, target: str) -> Route:
        """The machine apid would proxy to, or the error it would get: only members of the entry machine's
        cluster accept its certificate."""
        if entry.in_maintenance:
            return ApiError(
                grpc.StatusCode.PERMISSION_DENIED, "node routing is not available in maintenance mode"
            )
        machine = self.fleet.find(target)
        network = self.fleet.network
        if machine is None or not network.serving(machine.uuid) or network.is_partitioned(machine.uuid):
            return ApiError(grpc.StatusCode.UNAVAILABLE, f"connection error: {target}: no route to host")
        same_cluster = (
            machine.config is not None
            and entry.config is not None
            # apid presents its own certificate: the target must accept the entry machine's CA (both
            # CAs of a rotation are accepted until it is done).
            and entry.config.os_ca.crt.strip() in _trusted(machine.config)
            and machine.api_secure
        )
        if not same_cluster:
            return ApiError(
                grpc.StatusCode.UNAVAILABLE, f"connection error: {target}: authentication handshake failed"
            )
        return machine

    async def single(self, method: str, context: Context, *, one_to_many: str = "") -> tuple[Peer, Machine]:
        """The caller and the one machine a call goes to. ``one_to_many``: the error for any ``nodes``
        list (apid proxies some services only one-to-one); without it, a list of one node is taken."""
        peer, entry = await self.caller(method, context)
        targets, aggregate = await self.targets(entry, context)
        if aggregate and (one_to_many or len(targets) > 1):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, one_to_many or f"{method} streams from one node at a time"
            )
        target = targets[0][1]
        if isinstance(target, ApiError):
            await context.abort(target.code, target.message)
            raise AssertionError("unreachable")
        return peer, target


def _trusted(config: MachineConfig) -> tuple[bytes, ...]:
    cas = config.cas
    return cas.talos_trusted() if cas is not None else (config.os_ca.crt.strip(),)
