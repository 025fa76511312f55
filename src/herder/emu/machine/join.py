"""Emulated machines that join over SideroLink (``herder emu run --join "KERNEL ARGS"``), as a Talos machine
booted with those kernel arguments does: at every boot it calls the Provision API named by
``siderolink.api`` (or by its config's ``SideroLinkConfig``, once it has one) with its UUID, a fresh
WireGuard key and the join token, brings up its side of the tunnel (wireguard-go, herder as its one peer, a
keepalive) and serves its Talos API on its tunnel address only.

Each machine lives in a network namespace of its own (``hj-<uuid prefix>``) behind the emulator's: a veth
pair puts it on a bridge in the emulator's namespace, which forwards and masquerades its traffic (a machine
behind NAT), so it reaches herder while nothing outside reaches it but through the tunnel. That makes
changes to the namespace the emulator runs in (a bridge, IPv6 forwarding, an nftables table): run it in a
namespace of its own (``ip netns exec``). Everything it made is removed when it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from herder.emu import netns
from herder.emu.machine.events import EventLog
from herder.emu.machine.logs import LogBuffer, LogLine, timestamp
from herder.talos.api.siderolink import events_pb2 as pb_events
from herder.talos.api.siderolink import events_pb2_grpc as pb_events_grpc
from herder.talos.api.siderolink import provision_pb2 as pb
from herder.talos.api.siderolink import provision_pb2_grpc as pb_grpc
from herder.talos.machine.client import split_endpoint
from herder.talos.siderolink.kernel_args import JoinArgs
from herder.talos.siderolink.wireguard import WireGuard, WireGuardError, generate_keys

log = logging.getLogger("herder.emu.join")

PROVISION_TIMEOUT = 15.0
HANDSHAKE_TIMEOUT = 15.0
"""How long a new tunnel may take to make its first handshake (a keepalive starts one at once)."""
SEND_TIMEOUT = 10.0


def _kmsg(line: LogLine, sequence: int) -> bytes:
    """A kernel message as Talos sends it to ``talos.logging.kernel``: a JSON object, one a line."""
    message = {
        "facility": line.facility,
        "priority": line.priority,
        "seq": sequence,
        "msg": line.text,
        "talos-time": timestamp(line.at),
    }
    return json.dumps(message).encode() + b"\n"


class JoinFailed(Exception):
    """The machine could not join (refused, herder unreachable, WireGuard failing), with why."""


@dataclass
class _Joined:
    netns: str
    args: JoinArgs
    """How it joined this time: the kernel arguments, or what its config says."""
    address: str = ""
    wireguard: WireGuard | None = None
    senders: list[asyncio.Task[None]] = field(default_factory=list)


@dataclass
class Joiner:
    args: JoinArgs
    """The kernel arguments every machine boots with."""
    keepalive: int = 25
    """Seconds between the keepalives a machine sends herder (Talos's: 25)."""
    tag: str = field(default_factory=lambda: secrets.token_hex(2))
    _machines: dict[str, _Joined] = field(default_factory=dict)
    _hub: ipaddress.IPv6Network | None = None
    _next: int = 2
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def bridge(self) -> str:
        return f"hjbr{self.tag}"

    @property
    def table(self) -> str:
        return f"herder_emu_{self.tag}"

    @staticmethod
    def netns_of(uuid: str) -> str:
        return f"hj-{uuid.replace('-', '')[:10]}"

    async def _sh(self, *argv: str, inside: str | None = None) -> None:
        full = ["ip", "netns", "exec", inside, *argv] if inside else list(argv)
        process = await asyncio.create_subprocess_exec(
            *full, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
        )
        _, err = await process.communicate()
        if process.returncode != 0:
            raise JoinFailed(f"{' '.join(argv)}: {err.decode(errors='replace').strip()}")

    async def _ensure_hub(self) -> ipaddress.IPv6Network:
        if self._hub is not None:
            return self._hub
        hub = ipaddress.IPv6Network(
            f"fd{secrets.token_hex(1)}:{secrets.token_hex(2)}:{secrets.token_hex(2)}::/64"
        )
        # An address of its own: a bridge without one takes the lowest of its ports', so each machine that
        # joined later could change it under the others, whose neighbour entries then name an address the
        # bridge no longer answers to, and their packets are dropped until those entries expire (~30 s).
        mac = "02:" + ":".join(secrets.token_hex(1) for _ in range(5))
        await self._sh("ip", "link", "add", self.bridge, "address", mac, "type", "bridge")
        await self._sh("ip", "address", "add", f"{hub.network_address + 1}/64", "dev", self.bridge, "nodad")
        await self._sh("ip", "link", "set", self.bridge, "up")
        await self._sh("sysctl", "-q", "-w", "net.ipv6.conf.all.forwarding=1")
        await self._sh("nft", "add", "table", "ip6", self.table)
        await self._sh(
            "nft", "add", "chain", "ip6", self.table, "post",
            "{ type nat hook postrouting priority 100 ; }",
        )  # fmt: skip
        await self._sh(
            "nft", "add", "rule", "ip6", self.table, "post",
            "ip6", "saddr", str(hub), "oifname", "!=", self.bridge, "masquerade",
        )  # fmt: skip
        self._hub = hub
        return hub

    async def _ensure_netns(self, uuid: str, args: JoinArgs) -> _Joined:
        joined = self._machines.get(uuid)
        if joined is not None:
            joined.args = args
            return joined
        hub = await self._ensure_hub()
        name = self.netns_of(uuid)
        outside = f"hjv{uuid.replace('-', '')[:10]}"
        address = hub.network_address + self._next
        self._next += 1
        if (netns.NETNS_DIR / name).exists():
            await self._sh("ip", "netns", "del", name)  # left by an emulator killed with -9
        await self._sh("ip", "netns", "add", name)
        joined = _Joined(name, args)
        self._machines[uuid] = joined
        await self._sh("ip", "link", "set", "lo", "up", inside=name)
        await self._sh("ip", "link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", name)
        await self._sh("ip", "link", "set", outside, "master", self.bridge, "up")
        await self._sh("ip", "address", "add", f"{address}/64", "dev", "eth0", "nodad", inside=name)
        await self._sh("ip", "link", "set", "eth0", "up", inside=name)
        await self._sh(
            "ip", "-6", "route", "add", "default", "via", str(hub.network_address + 1), inside=name
        )
        return joined

    async def up(self, uuid: str, talos_version: str, args: JoinArgs) -> str:
        """Join (again) as ``args`` say: Provision, then the machine's side of the tunnel. Its tunnel
        address."""
        async with self._lock:
            joined = await self._ensure_netns(uuid, args)
        await self.down(uuid)
        keys = generate_keys()
        answer = await self._provision(joined.netns, uuid, keys.public, talos_version, args)
        interface = f"sl{uuid.replace('-', '')[:10]}"
        wireguard = WireGuard(interface, netns=joined.netns)
        try:
            await wireguard.start(keys.private, answer.node_address_prefix)
            await wireguard.set_peer(
                answer.server_public_key,
                [f"{answer.server_address}/128"],
                endpoint=answer.server_endpoint[0],
                keepalive=self.keepalive,
            )
            await self._handshake(wireguard)
        except (WireGuardError, OSError, JoinFailed) as exc:
            await wireguard.close()
            raise JoinFailed(f"WireGuard: {exc}") from None
        joined.wireguard = wireguard
        joined.address = str(ipaddress.IPv6Interface(answer.node_address_prefix).ip)
        netns.home(joined.address, joined.netns)
        return joined.address

    @staticmethod
    async def _handshake(wireguard: WireGuard) -> None:
        """Wait for the tunnel's first handshake: a tunnel that makes none is given up, and the machine joins
        again (a new key, a new port: a new flow through its NAT), as a Talos machine retries its join."""
        deadline = time.monotonic() + HANDSHAKE_TIMEOUT
        while time.monotonic() < deadline:
            if any(peer.last_handshake for peer in await wireguard.peers()):
                return
            await asyncio.sleep(0.2)
        raise JoinFailed(f"no handshake with herder within {HANDSHAKE_TIMEOUT:.0f}s")

    async def _provision(
        self, name: str, uuid: str, public_key: str, talos_version: str, args: JoinArgs
    ) -> pb.ProvisionResponse:
        host, port = split_endpoint(args.target)
        door = netns.Dialer(name, host, port)
        await door.start()
        through = f"127.0.0.1:{door.port}"
        # https:// as Talos dials it: TLS checked against the system's roots (gRPC's, which
        # GRPC_DEFAULT_SSL_ROOTS_FILE_PATH replaces), for the host of the URL, not the door's.
        channel = (
            grpc.aio.secure_channel(
                through, grpc.ssl_channel_credentials(), options=[("grpc.ssl_target_name_override", host)]
            )
            if args.secure
            else grpc.aio.insecure_channel(through)
        )
        try:
            async with channel:
                stub = pb_grpc.ProvisionServiceStub(channel)  # type: ignore[no-untyped-call]
                answer: pb.ProvisionResponse = await stub.Provision(
                    pb.ProvisionRequest(
                        node_uuid=uuid,
                        node_public_key=public_key,
                        join_token=args.token,
                        talos_version=talos_version,
                    ),
                    timeout=PROVISION_TIMEOUT,
                )
                return answer
        except grpc.aio.AioRpcError as exc:
            raise JoinFailed(f"Provision at {args.api}: {exc.code().name}: {exc.details()}") from None
        finally:
            await door.close()

    def report(self, uuid: str, events: EventLog, kernel: Callable[[], LogBuffer]) -> None:
        """Send the machine's events and kernel log where it joined saying, through the tunnel, as Talos
        does from the moment it joined (what it logged since it booted first)."""
        joined = self._machines.get(uuid)
        if joined is None:
            return
        if joined.args.events_sink:
            joined.senders.append(
                asyncio.create_task(self._send_events(joined.netns, joined.args.events_sink, events))
            )
        if joined.args.kernel_log:
            joined.senders.append(
                asyncio.create_task(self._send_kernel_log(joined.netns, joined.args.kernel_log, kernel))
            )

    async def _send_events(self, name: str, sink: str, events: EventLog) -> None:
        host, port = split_endpoint(sink)
        door = netns.Dialer(name, host, port)
        await door.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{door.port}") as channel:
                stub = pb_events_grpc.EventSinkServiceStub(channel)  # type: ignore[no-untyped-call]
                async for event in events.follow(tail_events=-1):
                    request = pb_events.EventRequest(data=event.data, id=event.id, actor_id=event.actor_id)
                    while True:
                        try:
                            await stub.Publish(request, timeout=SEND_TIMEOUT)
                            break
                        except grpc.aio.AioRpcError as exc:
                            log.info("events sink %s: %s", sink, exc.details())
                            await asyncio.sleep(1)
        finally:
            await door.close()

    async def _send_kernel_log(self, name: str, sink: str, kernel: Callable[[], LogBuffer]) -> None:
        host, port = split_endpoint(sink)
        sequence = 0
        while True:
            try:
                sock = await netns.connect(name, host, port)
                _, writer = await asyncio.open_connection(sock=sock)
                try:
                    async for line in kernel().follow(tail=-1 if sequence == 0 else 0):
                        sequence += 1
                        writer.write(_kmsg(line, sequence))
                        await writer.drain()
                finally:
                    writer.close()
                return
            except OSError as exc:
                log.info("kernel log sink %s: %s", sink, exc)
                await asyncio.sleep(1)

    async def down(self, uuid: str) -> None:
        """The machine's side of the tunnel goes (it is off, or reboots)."""
        joined = self._machines.get(uuid)
        if joined is not None:
            senders, joined.senders = joined.senders, []
            for task in senders:
                task.cancel()
            await asyncio.gather(*senders, return_exceptions=True)
        if joined is not None and joined.wireguard is not None:
            wireguard, joined.wireguard = joined.wireguard, None
            await wireguard.close()

    async def close(self) -> None:
        for uuid, joined in list(self._machines.items()):
            await self.down(uuid)
            if joined.address:
                netns.home(joined.address, None)
            with contextlib.suppress(JoinFailed):
                await self._sh("ip", "netns", "del", joined.netns)
        self._machines.clear()
        if self._hub is not None:
            with contextlib.suppress(JoinFailed):
                await self._sh("nft", "delete", "table", "ip6", self.table)
            with contextlib.suppress(JoinFailed):
                await self._sh("ip", "link", "del", self.bridge)
            self._hub = None
