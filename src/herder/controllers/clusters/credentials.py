"""Credentials users download for a cluster, made from its secrets (which users never read themselves):

- ``kubeconfig``: the cluster's admin kubeconfig, its client certificate naming the caller and expiring
  after ``ttlSeconds`` (an hour by default);
- ``talosconfig``: a talosconfig for the cluster's control planes whose certificate carries the Talos
  role of the caller's herder role (Reader → ``os:reader``, Operator → ``os:operator``, Admin and
  Support → ``os:admin``).

They are object actions of Cluster (``herder.api.actions``); the policy table says who may run them.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from herder.controllers.clusters.cluster_keys import ClusterKeys
from herder.resources import Resource
from herder.resources.clusters import CLUSTER, CLUSTER_MACHINE, ClusterSpec
from herder.resources.machines import CLUSTER_LABEL, MACHINE, MachineSpec
from herder.state.errors import NotFound
from herder.state.store import Store
from herder.talos.kubeconfig import generate_admin_kubeconfig
from herder.talos.machine import split_endpoint
from herder.talos.talosconfig import dump_talosconfig, generate_talosconfig

DEFAULT_TTL = 3600
MAX_TTL = 30 * 24 * 3600
TALOS_ROLES = {"Reader": "os:reader", "Operator": "os:operator", "Admin": "os:admin", "Support": "os:admin"}


class CredentialsUnavailable(Exception):
    """The cluster cannot give credentials yet (no secrets or no endpoint), or the options are wrong."""


def _ttl(options: dict[str, Any]) -> timedelta:
    value = options.get("ttlSeconds", DEFAULT_TTL)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= MAX_TTL:
        raise CredentialsUnavailable(f"ttlSeconds: must be a whole number of seconds from 1 to {MAX_TTL}")
    return timedelta(seconds=value)


class ClusterCredentials:
    def __init__(self, store: Store, keys: ClusterKeys) -> None:
        self._store = store
        self._keys = keys

    async def kubeconfig(self, cluster: Resource, user: str, role: str, options: dict[str, Any]) -> bytes:
        lifetime = _ttl(options)
        view = await self._keys.of(cluster)
        endpoint = CLUSTER.spec_of(cluster, ClusterSpec).endpoint or (cluster.status or {}).get("endpoint")
        if view is None or not endpoint:
            raise CredentialsUnavailable(f"cluster {cluster.name} has no secrets or endpoint yet")
        text = generate_admin_kubeconfig(
            view.bundle.k8s,
            cluster_name=cluster.name,
            endpoint=str(endpoint),
            lifetime=lifetime,
            common_name=user,
        )
        return text.encode()

    async def talosconfig(self, cluster: Resource, user: str, role: str, options: dict[str, Any]) -> bytes:
        lifetime = _ttl(options)
        talos_role = TALOS_ROLES.get(role)
        if talos_role is None:
            raise CredentialsUnavailable(f"role {role} has no Talos role")
        view = await self._keys.of(cluster)
        if view is None:
            raise CredentialsUnavailable(f"cluster {cluster.name} has no secrets yet")
        endpoints = await self._control_planes(cluster)
        config = generate_talosconfig(
            view.bundle, cluster.name, endpoints=endpoints, roles=(talos_role,), lifetime=lifetime
        )
        return dump_talosconfig(config).encode()

    async def _control_planes(self, cluster: Resource) -> list[str]:
        listed = await self._store.list(
            CLUSTER_MACHINE.kind, cluster.namespace, label_selector=f"{CLUSTER_LABEL}={cluster.name}"
        )
        hosts = []
        for member in listed.items:
            if (member.spec or {}).get("role") != "controlplane":
                continue
            try:
                machine = await self._store.get(MACHINE.kind, member.name, member.namespace)
            except NotFound:
                continue
            hosts.append(split_endpoint(MACHINE.spec_of(machine, MachineSpec).endpoint)[0])
        return sorted(hosts)
