"""herder's Talos API gateway as ``herder serve`` runs it (``--talos-listen HOST:PORT``): the talosconfigs
``herder cluster talosconfig`` hands out, which point at it, and the server that takes their calls.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from herder.api.audit import AuditLog
from herder.api.serve import host_port, parse_listen
from herder.resources import Resource
from herder.state.store import Store
from herder.talos.talosconfig import Talosconfig, TalosContext
from herder.talos_gateway.authority import ClusterRef, GatewayAuthority
from herder.talos_gateway.callers import account
from herder.talos_gateway.server import GatewayServer


class TalosGateway:
    def __init__(self, data_dir: Path, listen: str, *, support: bool) -> None:
        """``support``: whether the server holds a Support token (Support's talosconfigs work only then)."""
        self.host, self.port = parse_listen(listen, "--talos-listen")
        self.endpoint = host_port(self.host, self.port)
        """What talosconfigs name as their endpoint."""
        self._authority = GatewayAuthority(data_dir)
        self._support = support

    def talosconfigs(self, store: Store) -> GatewayTalosconfigs:
        return GatewayTalosconfigs(store, self._authority, self.endpoint, support=self._support)

    def service(self, store: Store, audit: AuditLog) -> GatewayServer:
        return GatewayServer(store, audit, self._authority, self.host, self.port, support=self._support)


class GatewayTalosconfigs:
    """The talosconfigs of the gateway (``herder.controllers.clusters.credentials.TalosGateway``)."""

    def __init__(self, store: Store, authority: GatewayAuthority, endpoint: str, *, support: bool) -> None:
        self._store = store
        self._authority = authority
        self._endpoint = endpoint
        self._support = support

    async def talosconfig(
        self, cluster: Resource, identity: str, talos_role: str, lifetime: timedelta
    ) -> Talosconfig:
        held = await account(self._store, identity, support=self._support)
        ref = ClusterRef(cluster.namespace or "", cluster.name, cluster.metadata.uid or "")
        issued = self._authority.issue(identity, held.uid if held else "", talos_role, ref, lifetime)
        context = TalosContext(
            endpoints=(self._endpoint,), ca=self._authority.ca_certificate, crt=issued.crt, key=issued.key
        )
        return Talosconfig(context=cluster.name, contexts={cluster.name: context})
