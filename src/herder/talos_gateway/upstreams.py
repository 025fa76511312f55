"""The gateway's connections to machines: mutual TLS with the machine's cluster's Talos CA, presenting a
certificate herder issues from that CA with the caller's Talos role (not herder's own os:admin), so that
the machine itself still enforces what Talos enforces per role beyond the method table (sensitive
resources need os:admin, a Reader may apply a config only in maintenance mode).

Connections are kept and shared by calls, one per machine endpoint and certificate (so per cluster
secrets revision and role); the least recently used idle ones are closed when there are too many.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta

import grpc

from herder.resources import Resource
from herder.resources.cluster_secrets import CLUSTER_SECRETS, ClusterSecretsSpec
from herder.resources.machines import MACHINE, MachineSpec
from herder.state.errors import NotFound
from herder.state.store import Store
from herder.talos.machine import Credentials, MachineClient
from herder.talos.machine.pool import ClientPool
from herder.talos.pki import CertificateAndKey, ca_bundle
from herder.talos.secrets import load_secrets
from herder.talos.talosconfig import issue_client_certificate
from herder.talos_gateway.callers import Refused

# Renewed at half their life, as herder's own credentials are.
_CREDENTIAL_LIFETIME = timedelta(days=30)
KEEP = 64
"""Idle connections kept beyond this many are closed, least recently used first."""


@dataclass
class _Role:
    credentials: Credentials
    made: float = field(default_factory=time.monotonic)


@dataclass
class _ClusterCA:
    revision: str
    ca: CertificateAndKey
    trusted: bytes
    """The CAs machines may serve from (more than the issuing one during a rotation)."""
    roles: dict[str, _Role] = field(default_factory=dict)


class Upstreams:
    def __init__(self, store: Store, keep: int = KEEP) -> None:
        self._store = store
        self._cas: dict[tuple[str, str], _ClusterCA] = {}
        self._loading: dict[tuple[str, str], asyncio.Lock] = {}
        self._clients = ClientPool(keep=keep)

    async def _credentials(self, cluster: Resource, talos_role: str) -> Credentials:
        """The credentials of ``talos_role`` for the machines of ``cluster``."""
        try:
            stored = await self._store.get(CLUSTER_SECRETS, cluster.name, cluster.namespace)
        except NotFound:
            raise Refused(
                grpc.StatusCode.UNAVAILABLE, f"cluster {cluster.name} has no Talos credentials yet"
            ) from None
        key = (cluster.namespace or "", cluster.name)
        revision = stored.metadata.resource_version or ""
        async with self._loading.setdefault(key, asyncio.Lock()):
            known = self._cas.get(key)
            if known is None or known.revision != revision:
                spec = CLUSTER_SECRETS.spec_of(stored, ClusterSecretsSpec)
                # Parsing the bundle decodes RSA keys: off the event loop. herder made it and kept it sealed.
                secrets = await asyncio.to_thread(load_secrets, spec.bundle, check_keys=False)
                trusted = ca_bundle(secrets.os.crt, *spec.trusted("TalosCA"))
                known = self._cas[key] = _ClusterCA(revision, secrets.os, trusted)
            role = known.roles.get(talos_role)
            if role is None or time.monotonic() - role.made > _CREDENTIAL_LIFETIME.total_seconds() / 2:
                issued = issue_client_certificate(known.ca, (talos_role,), lifetime=_CREDENTIAL_LIFETIME)
                role = known.roles[talos_role] = _Role(Credentials(known.trusted, issued.crt, issued.key))
        return role.credentials

    @asynccontextmanager
    async def client(
        self, cluster: Resource, machine: Resource, talos_role: str
    ) -> AsyncIterator[MachineClient]:
        """A client of ``machine`` with ``talos_role`` in ``cluster``, held for the duration of a call."""
        endpoint = MACHINE.spec_of(machine, MachineSpec).endpoint
        if not endpoint:
            raise Refused(grpc.StatusCode.UNAVAILABLE, f"machine {machine.name} has no Talos API endpoint")
        credentials = await self._credentials(cluster, talos_role)
        async with self._clients.client(endpoint, credentials) as client:
            yield client

    async def close(self) -> None:
        await self._clients.close()
