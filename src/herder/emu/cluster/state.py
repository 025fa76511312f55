"""What the machines of one cluster share in the emulator: the Talos CA a control plane brought (trustd, for
workers' API certificates) and an emulated etcd: bootstrapped once, members, a leader, quorum, and a
keyspace (where the cluster's emulated Kubernetes API keeps its objects, and what a snapshot holds).

Machines belong to a cluster through the cluster id of their config. A member is healthy while its machine
runs reachable (``member_up``, supplied by the emulator); etcd has quorum while a majority of its members is
healthy, and without quorum it has no leader and refuses writes and membership changes, as etcd does.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from herder.emu.errors import ApiError, precondition
from herder.state.backend import KV
from herder.state.errors import Unavailable
from herder.state.memory import MemoryBackend
from herder.talos.pki import CertificateAndKey

NO_LEADER = "etcdserver: no leader"
NOT_ENOUGH_STARTED = "etcdserver: re-configuration failed due to not enough started members"
WATCH_HISTORY = 2000
"""Changes of a cluster's keyspace kept for watches (Kubernetes clients re-list after a gap)."""


class Keyspace(MemoryBackend):
    """The emulated etcd's keys, as a state backend: writes are refused while etcd has no quorum, and each
    write is reported (the emulator persists the keyspace)."""

    def __init__(self) -> None:
        super().__init__(history=WATCH_HISTORY)
        self.writable: Callable[[], bool] = lambda: True
        self.written: Callable[[], None] = lambda: None

    def _admit(self) -> None:
        if not self.writable():
            raise Unavailable(NO_LEADER)

    @property
    def size(self) -> int:
        """The bytes its keys and values take, as etcd's database size stands for."""
        return sum(len(key) + len(kv.value) for key, kv in self._data.items())

    @property
    def current_revision(self) -> int:
        return self._rev

    async def create(self, key: str, value: bytes) -> int:
        self._admit()
        rev = await super().create(key, value)
        self.written()
        return rev

    async def replace(self, key: str, value: bytes, expected_rev: int) -> int:
        self._admit()
        rev = await super().replace(key, value, expected_rev)
        self.written()
        return rev

    async def remove(self, key: str, expected_rev: int) -> int:
        self._admit()
        rev = await super().remove(key, expected_rev)
        self.written()
        return rev

    def load(self, data: dict[str, str]) -> None:
        """Fill an empty keyspace (from a snapshot or the emulator's files)."""
        for key in sorted(data):
            self._commit(key, data[key].encode())

    def dump(self) -> dict[str, str]:
        entries: list[KV] = list(self._data.values())
        return {kv.key: kv.value.decode() for kv in entries}


def url_host(address: str) -> str:
    """An address as a URL names it: an IPv6 one in brackets (a joined machine's tunnel address)."""
    return f"[{address}]" if ":" in address else address


@dataclass
class EtcdMember:
    id: int
    machine: str
    """The uuid of the machine that runs it."""
    hostname: str
    address: str

    @property
    def peer_urls(self) -> list[str]:
        return [f"https://{url_host(self.address)}:2380"]

    @property
    def client_urls(self) -> list[str]:
        return [f"https://{url_host(self.address)}:2379"]


@dataclass
class Cluster:
    id: str
    name: str = ""
    os_ca: CertificateAndKey | None = None
    token: str = ""
    bootstrapped: bool = False
    bootstrap_requests: int = 0
    """Bootstrap calls its control planes got, refused ones too: a management plane asks once."""
    members: dict[int, EtcdMember] = field(default_factory=dict)
    leader: int | None = None
    term: int = 1
    """Elections so far (raft's term): a new leader makes a new term."""
    keyspace: Keyspace = field(default_factory=Keyspace)
    trustd: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once a control plane of the cluster runs: workers can then obtain their API certificate."""
    member_up: Callable[[str], bool] = field(default=lambda _machine: True, repr=False)
    """Whether the etcd of a machine (by uuid) runs and is reachable; the emulator supplies it."""
    changed: Callable[[], None] = field(default=lambda: None, repr=False)
    """Told of every change of membership (the emulator persists the cluster and syncs Kubernetes)."""
    removed: set[str] = field(default_factory=set, repr=False)
    """Machines whose member left or was removed: their etcd stays stopped until they boot again."""

    def __post_init__(self) -> None:
        self.keyspace.writable = self.has_quorum

    def learn_control_plane(self, name: str, os_ca: CertificateAndKey, token: str) -> None:
        """A control plane config carries the CA key and the trustd token: remember them for workers."""
        self.name = self.name or name
        if os_ca.key:
            self.os_ca = os_ca
        self.token = token or self.token

    def issuing_ca_for(self, ca_crt: bytes, token: str) -> CertificateAndKey | None:
        """The CA trustd signs a worker's certificate with, if the worker's CA and token match the cluster's."""
        if self.os_ca is None or self.os_ca.crt != ca_crt or token != self.token:
            return None
        return self.os_ca

    # --- etcd ---

    def healthy(self, member: EtcdMember) -> bool:
        return self.member_up(member.machine)

    def has_quorum(self) -> bool:
        healthy = sum(1 for m in self.members.values() if self.healthy(m))
        return healthy > len(self.members) // 2

    def current_leader(self) -> EtcdMember | None:
        """The leader now: none without quorum; a new one elected when the old one is down or gone."""
        if not self.has_quorum():
            return None
        leader = self.members.get(self.leader) if self.leader is not None else None
        if leader is None or not self.healthy(leader):
            leader = next(m for m in self.members.values() if self.healthy(m))
            self.leader = leader.id
            self.term += 1
        return leader

    def status_of(self, member_id: int) -> tuple[int, int, int, int]:
        """What a member's EtcdStatus says: the leader it follows (0: none), the database size, the raft
        index (the keyspace's revision) and term (elections so far)."""
        leader = self.current_leader()
        return (leader.id if leader else 0), self.keyspace.size, self.keyspace.current_revision, self.term

    def member_healthy(self, machine: str) -> bool:
        """What the machine's etcd service reports: a member, up, in a cluster with quorum."""
        member = self.member_of(machine)
        return member is not None and self.healthy(member) and self.has_quorum()

    def bootstrap(self, machine: str, hostname: str, address: str, snapshot: bytes | None) -> EtcdMember:
        self.bootstrap_requests += 1
        if self.bootstrapped:
            raise ApiError(grpc.StatusCode.ALREADY_EXISTS, "etcd data directory is not empty")
        if snapshot is not None:
            self.keyspace.load(_load_snapshot(snapshot))
        self.bootstrapped = True
        member = self._add(machine, hostname, address)
        self.leader = member.id
        return member

    def member_of(self, machine: str) -> EtcdMember | None:
        return next((m for m in self.members.values() if m.machine == machine), None)

    def join(self, machine: str, hostname: str, address: str) -> EtcdMember | None:
        """A control plane joins the bootstrapped etcd (idempotent); None while etcd cannot add members
        (no quorum): the machine keeps trying, as Talos's etcd service does."""
        existing = self.member_of(machine)
        if existing is not None:
            existing.hostname, existing.address = hostname, address
            return existing
        if not self.bootstrapped or not self.has_quorum() or machine in self.removed:
            return None
        return self._add(machine, hostname, address)

    def _add(self, machine: str, hostname: str, address: str) -> EtcdMember:
        member = EtcdMember(int.from_bytes(os.urandom(8), "big") >> 1, machine, hostname, address)
        self.members[member.id] = member
        if self.leader is None:
            self.leader = member.id
        self.changed()
        return member

    def remove(self, member_id: int) -> None:
        """Remove a member, as etcd with its strict reconfiguration check: only with quorum, and only if
        the members left still have one."""
        if member_id not in self.members:
            raise ApiError(grpc.StatusCode.NOT_FOUND, f"etcd member {member_id:x} not found")
        if not self.has_quorum():
            raise ApiError(grpc.StatusCode.UNAVAILABLE, NO_LEADER)
        rest = [m for m in self.members.values() if m.id != member_id]
        if sum(1 for m in rest if self.healthy(m)) <= len(rest) // 2:
            raise precondition(NOT_ENOUGH_STARTED)
        self.removed.add(self.members.pop(member_id).machine)
        if self.leader == member_id:
            self.leader = None
            self.current_leader()
        self.changed()

    def forfeit_leadership(self, machine: str) -> str:
        """Move leadership away from ``machine``'s member; the new leader's name, or empty if it did not lead."""
        member = self.member_of(machine)
        if member is None:
            raise precondition("etcd is not running on this node")
        leader = self.current_leader()
        if leader is None:
            raise ApiError(grpc.StatusCode.UNAVAILABLE, NO_LEADER)
        if leader.id != member.id:
            return ""
        others = [m for m in self.members.values() if m.id != member.id and self.healthy(m)]
        if not others:
            return ""
        self.leader = others[0].id
        self.term += 1
        self.changed()
        return others[0].hostname

    def snapshot(self) -> bytes:
        return json.dumps(
            {"kind": "herder-emu-etcd-snapshot", "data": self.keyspace.dump()}, sort_keys=True
        ).encode()

    # --- persistence ---

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "os_ca": {"crt": self.os_ca.crt.decode(), "key": self.os_ca.key.decode()} if self.os_ca else None,
            "token": self.token,
            "bootstrapped": self.bootstrapped,
            "bootstrap_requests": self.bootstrap_requests,
            "members": [vars(m) for m in self.members.values()],
            "leader": self.leader,
            "data": self.keyspace.dump(),
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Cluster:
        ca = raw.get("os_ca")
        members = [EtcdMember(**m) for m in raw.get("members", ())]
        cluster = cls(
            id=raw["id"],
            name=raw.get("name", ""),
            os_ca=CertificateAndKey(crt=ca["crt"].encode(), key=ca["key"].encode()) if ca else None,
            token=raw.get("token", ""),
            bootstrapped=raw.get("bootstrapped", False),
            bootstrap_requests=raw.get("bootstrap_requests", 0),
            members={m.id: m for m in members},
            leader=raw.get("leader"),
        )
        cluster.keyspace.load({str(k): str(v) for k, v in raw.get("data", {}).items()})
        return cluster


def _load_snapshot(snapshot: bytes) -> dict[str, str]:
    try:
        decoded = json.loads(snapshot)
        data = decoded["data"]
        if decoded.get("kind") != "herder-emu-etcd-snapshot" or not isinstance(data, dict):
            raise ValueError("not an emulated etcd snapshot")
    except (ValueError, KeyError, TypeError) as e:
        raise ApiError(
            grpc.StatusCode.INVALID_ARGUMENT, f"failed to recover etcd: invalid snapshot: {e}"
        ) from None
    return {str(k): str(v) for k, v in data.items()}
