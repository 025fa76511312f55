"""What the machines of one cluster share in the emulator: the Talos CA a control plane brought (trustd, for
workers' API certificates) and an emulated etcd (bootstrapped once, members, leader, data, snapshots).

Machines belong to a cluster through the cluster id of their config. The cluster's Kubernetes side, quorum
and health rules build on this (issue 6).
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field
from typing import Any

import grpc

from herder.emu.errors import ApiError, precondition
from herder.talos.pki import CertificateAndKey


@dataclass
class EtcdMember:
    id: int
    machine: str
    """The uuid of the machine that runs it."""
    hostname: str
    address: str

    @property
    def peer_urls(self) -> list[str]:
        return [f"https://{self.address}:2380"]

    @property
    def client_urls(self) -> list[str]:
        return [f"https://{self.address}:2379"]


@dataclass
class Cluster:
    id: str
    name: str = ""
    os_ca: CertificateAndKey | None = None
    token: str = ""
    bootstrapped: bool = False
    members: dict[int, EtcdMember] = field(default_factory=dict)
    leader: int | None = None
    data: dict[str, str] = field(default_factory=dict)
    """The emulated etcd keyspace (what a snapshot holds)."""
    trustd: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once a control plane of the cluster runs: workers can then obtain their API certificate."""

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

    def bootstrap(self, machine: str, hostname: str, address: str, snapshot: bytes | None) -> EtcdMember:
        if self.bootstrapped:
            raise ApiError(grpc.StatusCode.ALREADY_EXISTS, "etcd data directory is not empty")
        if snapshot is not None:
            self.data = _load_snapshot(snapshot)
        self.bootstrapped = True
        member = self.join(machine, hostname, address)
        self.leader = member.id
        return member

    def member_of(self, machine: str) -> EtcdMember | None:
        return next((m for m in self.members.values() if m.machine == machine), None)

    def join(self, machine: str, hostname: str, address: str) -> EtcdMember:
        """A control plane joins the bootstrapped etcd (idempotent)."""
        existing = self.member_of(machine)
        if existing is not None:
            existing.hostname, existing.address = hostname, address
            return existing
        member = EtcdMember(int.from_bytes(os.urandom(8), "big") >> 1, machine, hostname, address)
        self.members[member.id] = member
        if self.leader is None:
            self.leader = member.id
        return member

    def remove(self, member_id: int) -> None:
        if member_id not in self.members:
            raise ApiError(grpc.StatusCode.NOT_FOUND, f"etcd member {member_id:x} not found")
        del self.members[member_id]
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)

    def forfeit_leadership(self, machine: str) -> str:
        """Move leadership away from ``machine``'s member; the new leader's name, or empty if it did not lead."""
        member = self.member_of(machine)
        if member is None:
            raise precondition("etcd is not running on this node")
        if self.leader != member.id:
            return ""
        others = [m for m in self.members.values() if m.id != member.id]
        if not others:
            return ""
        self.leader = others[0].id
        return others[0].hostname

    def snapshot(self) -> bytes:
        return json.dumps({"kind": "herder-emu-etcd-snapshot", "data": self.data}, sort_keys=True).encode()

    # --- persistence ---

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "os_ca": {"crt": self.os_ca.crt.decode(), "key": self.os_ca.key.decode()} if self.os_ca else None,
            "token": self.token,
            "bootstrapped": self.bootstrapped,
            "members": [vars(m) for m in self.members.values()],
            "leader": self.leader,
            "data": self.data,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Cluster:
        ca = raw.get("os_ca")
        members = [EtcdMember(**m) for m in raw.get("members", ())]
        return cls(
            id=raw["id"],
            name=raw.get("name", ""),
            os_ca=CertificateAndKey(crt=ca["crt"].encode(), key=ca["key"].encode()) if ca else None,
            token=raw.get("token", ""),
            bootstrapped=raw.get("bootstrapped", False),
            members={m.id: m for m in members},
            leader=raw.get("leader"),
            data=dict(raw.get("data", {})),
        )


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
