"""The ClusterRole aggregation controller of kube-controller-manager: an aggregated ClusterRole's ``rules`` are
kept equal to the rules of the ClusterRoles its ``aggregationRule`` selects (``authorizer`` grants them
already; this writes them where ``kubectl get clusterrole`` shows them)."""

from __future__ import annotations

import asyncio
import logging

from herder.emu.cluster.authorizer import Authorizer
from herder.emu.cluster.rbac import CLUSTER_ROLE
from herder.state.errors import NotFound, StateError
from herder.state.store import Store

log = logging.getLogger(__name__)

RETRY_DELAY = 0.5
"""Seconds before an aggregation that failed (etcd without quorum, a conflicting write) is tried again."""


class Aggregation:
    """Runs while the cluster's API does; wakes on every RBAC change."""

    def __init__(self, store: Store, authorizer: Authorizer) -> None:
        self.store = store
        self.authorizer = authorizer
        self._wake = asyncio.Event()
        authorizer.on_change = self._wake.set

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.aggregate()
            except StateError as e:
                log.debug("aggregating cluster roles: %s; trying again", e)
                await asyncio.sleep(RETRY_DELAY)
                self._wake.set()

    async def aggregate(self) -> None:
        for name, rules in list(self.authorizer.stale_aggregations()):
            try:
                role = await self.store.get(CLUSTER_ROLE, name)
            except NotFound:
                continue
            changed = role.clone()
            assert changed.model_extra is not None
            changed.model_extra["rules"] = rules
            await self.store.update(changed, actor="system:controller:clusterrole-aggregation-controller")
