"""Credentials users download for a cluster, made from its secrets (which users never read themselves):

- ``kubeconfig``: break glass — the cluster's own admin kubeconfig, straight to its API, bypassing herder's
  proxy: its client certificate (``system:masters``) names the caller and expires after ``ttlSeconds`` (an
  hour by default), whatever happens to the caller meanwhile. Admin only; the Cluster is marked with
  ``herder.dev/break-glass-issued`` (when, and to whom), and the request is audited;
- ``talosconfig``: a talosconfig for herder's Talos API gateway, whose certificate names the caller and
  carries the Talos role of the caller's herder role (Reader → ``os:reader``, Operator → ``os:operator``,
  Admin and Support → ``os:admin``); the gateway, given in by the composition root, issues it;
- ``talosconfig-break-glass``: break glass — an ``os:admin`` talosconfig signed by the cluster's own Talos
  CA, straight to its control planes' Talos API, bypassing the gateway, expiring after ``ttlSeconds``. Admin
  only, marked and audited as the kubeconfig is; a cluster whose control planes the platform runs
  (managed) gives it to Support only, since the platform's machines trust the same CA.

They are object actions of Cluster (``herder.api.actions``); the policy table says who may run them.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Protocol

from herder.controllers.cluster_keys import ClusterKeys
from herder.controllers.members import control_planes
from herder.resources import Resource
from herder.resources.access import TALOS_ROLES
from herder.resources.clusters import BREAK_GLASS_ANNOTATION, CLUSTER, ClusterSpec, ClusterStatus
from herder.resources.status import status_of
from herder.runtime.controller import Context, ObjectKey
from herder.runtime.outputs import Writes
from herder.talos.kubeconfig import generate_admin_kubeconfig
from herder.talos.talosconfig import Talosconfig, dump_talosconfig, generate_talosconfig

DEFAULT_TTL = 3600
MAX_TTL = 30 * 24 * 3600


class CredentialsUnavailable(Exception):
    """The cluster cannot give credentials yet (no secrets or no endpoint), or the options are wrong."""


def _ttl(options: dict[str, Any]) -> timedelta:
    value = options.get("ttlSeconds", DEFAULT_TTL)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= MAX_TTL:
        raise CredentialsUnavailable(f"ttlSeconds: must be a whole number of seconds from 1 to {MAX_TTL}")
    return timedelta(seconds=value)


class TalosGateway(Protocol):
    """Where users reach the Talos API of their clusters' machines: herder's gateway (``herder.talos_gateway``)."""

    async def talosconfig(
        self, cluster: Resource, identity: str, talos_role: str, lifetime: timedelta
    ) -> Talosconfig:
        """A talosconfig of ``identity`` for ``cluster``, its certificate carrying ``talos_role``."""
        ...


class ClusterCredentials:
    def __init__(self, keys: ClusterKeys, talos: TalosGateway | None = None) -> None:
        self._keys = keys
        self._talos = talos
        self._ctx = Context(
            keys.store,
            "BreakGlass",
            (Writes(CLUSTER.kind, f"metadata.annotations[{BREAK_GLASS_ANNOTATION}]"),),
        )

    async def kubeconfig(self, cluster: Resource, user: str, role: str, options: dict[str, Any]) -> bytes:
        lifetime = _ttl(options)
        view = await self._keys.of(cluster)
        endpoint = (
            CLUSTER.spec_of(cluster, ClusterSpec).endpoint or status_of(cluster, ClusterStatus).endpoint
        )
        if view is None or not endpoint:
            raise CredentialsUnavailable(f"cluster {cluster.name} has no secrets or endpoint yet")
        await self._mark(cluster, user)
        text = generate_admin_kubeconfig(
            view.bundle.k8s,
            cluster_name=cluster.name,
            endpoint=endpoint,
            lifetime=lifetime,
            # During a rotation the API servers may serve from either CA.
            accepted_cas=view.trusted_kubernetes,
            common_name=user,
        )
        return text.encode()

    async def break_glass_talosconfig(
        self, cluster: Resource, user: str, role: str, options: dict[str, Any]
    ) -> bytes:
        lifetime = _ttl(options)
        if CLUSTER.spec_of(cluster, ClusterSpec).managed is not None and role != "Support":
            raise CredentialsUnavailable(
                f"cluster {cluster.name}: its control planes are the platform's, and trust the same Talos CA; "
                "ask the platform (Support) for break-glass access"
            )
        view = await self._keys.of(cluster)
        endpoints = sorted((await control_planes(self._ctx, cluster))[0])
        if view is None or not endpoints:
            raise CredentialsUnavailable(f"cluster {cluster.name} has no secrets or control planes yet")
        await self._mark(cluster, user)
        config = generate_talosconfig(view.bundle, cluster.name, endpoints=endpoints, lifetime=lifetime)
        return dump_talosconfig(config).encode()

    async def _mark(self, cluster: Resource, user: str) -> None:
        issued = f"{self._ctx.clock.rfc3339()} {user}"

        def mark(obj: Resource) -> None:
            obj.metadata.annotations[BREAK_GLASS_ANNOTATION] = issued

        await self._ctx.mutate(ObjectKey.of(cluster), mark)

    async def talosconfig(self, cluster: Resource, user: str, role: str, options: dict[str, Any]) -> bytes:
        lifetime = _ttl(options)
        talos_role = TALOS_ROLES.get(role)
        if talos_role is None:
            raise CredentialsUnavailable(f"role {role} has no Talos role")
        if self._talos is None:
            raise CredentialsUnavailable("this server runs no Talos API gateway")
        return dump_talosconfig(await self._talos.talosconfig(cluster, user, talos_role, lifetime)).encode()
