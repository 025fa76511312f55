"""Who am I, what may I — asked of herder's API (``kubectl auth whoami``, ``kubectl auth can-i``), answered
from herder's own policy, per-cluster rules included (``krm.reviews`` reads and writes the reviews).

A question about a named object that the caller may not see is answered as for an object that does not
exist, with the caller's own role: the answer never tells that it exists.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from herder.api import roles, tokens
from herder.api.cluster_access import effective_role, kubernetes_groups
from herder.api.policy import HerderPolicy
from herder.krm import media
from herder.krm.policy import Access, Denied, Identity
from herder.krm.reviews import Reviews
from herder.krm.status import ApiError, api_error
from herder.resources import KindInfo, KindRegistry, Resource
from herder.resources.clusters import CLUSTER
from herder.state.errors import NotFound
from herder.state.store import Store

# Paths every caller may read (discovery and health), as Kubernetes' system:discovery grants them.
_PUBLIC_PATHS = ("/version", "/api", "/apis", "/healthz", "/livez", "/readyz", "/openapi")


class HerderReviews(Reviews[Identity]):
    def __init__(self, store: Store, policy: HerderPolicy) -> None:
        self._store = store
        self._policy = policy
        self._registry: KindRegistry = store.registry

    async def authenticate(self, request: Request) -> Identity:
        return await self._policy.authenticate(request)

    def user_info(self, who: Identity) -> dict[str, Any]:
        extra = {"herder.dev/role": [who.role]}
        if who.impersonator:
            extra["herder.dev/impersonator"] = [who.impersonator]
        return {"username": who.name, "groups": ["system:authenticated"], "extra": extra}

    async def access(self, who: Identity, spec: dict[str, Any]) -> dict[str, Any]:
        resource = spec.get("resourceAttributes")
        if resource is None:
            path = str((spec.get("nonResourceAttributes") or {}).get("path") or "")
            allowed = any(path == p or path.startswith(p + "/") for p in _PUBLIC_PATHS)
            return {"allowed": allowed}
        info = self._registry.find_plural(
            str(resource.get("group") or ""), str(resource.get("resource") or "")
        )
        if info is None:
            return {"allowed": False, "reason": "herder serves no such resource"}
        access = Access(
            str(resource.get("verb") or ""),
            info,
            str(resource.get("namespace") or "") or None,
            str(resource.get("name") or "") or None,
            str(resource.get("subresource") or "") or None,
        )
        try:
            obj = await self._named(who, info, access)
            self._policy.authorize(who, access, obj)
        except Denied as exc:
            return {"allowed": False, "reason": str(exc)}
        return {"allowed": True}

    async def _named(self, who: Identity, info: KindInfo, access: Access) -> Resource | None:
        """The object the question names, when the caller may see it; a Cluster the caller does not see
        stands as the cluster of that name (a rule may grant it), anything else as no object."""
        if access.name is None:
            return None
        try:
            obj = await self._store.get(info, access.name, access.namespace if info.namespaced else None)
        except NotFound:
            obj = None
        if obj is not None and self._policy.visible(who, info, obj.name, obj.metadata.labels):
            return obj
        if info.kind == CLUSTER.kind:
            return Resource.model_validate(
                {"apiVersion": info.api_version, "kind": info.kind, "metadata": {"name": access.name}}
            )
        return None

    async def rules(self, who: Identity, spec: dict[str, Any]) -> dict[str, Any]:
        """What the caller's own role allows on each kind, and what rules raise it to on each cluster it
        sees (by name: the objects of a cluster carry its label, which rules cannot express)."""
        resource_rules = []
        for info in self._registry:
            verbs = _verbs(who.role, info)
            if verbs:
                resource_rules.append({"verbs": verbs, "apiGroups": [info.group], "resources": [info.plural]})
        for cluster in (await self._store.list(CLUSTER)).items:
            if not self._policy.visible(who, CLUSTER, cluster.name, cluster.metadata.labels):
                continue
            role = self._policy.cluster_role(who, cluster.name)
            raised = [v for v in _verbs(role, CLUSTER) if v not in _verbs(who.role, CLUSTER)]
            if raised:
                resource_rules.append(
                    {
                        "verbs": raised,
                        "apiGroups": [CLUSTER.group],
                        "resources": [CLUSTER.plural],
                        "resourceNames": [cluster.name],
                    }
                )
        return {
            "resourceRules": resource_rules,
            "nonResourceRules": [
                {
                    "verbs": ["get"],
                    "nonResourceURLs": [p + "*" if p != "/version" else p for p in _PUBLIC_PATHS],
                }
            ],
            "incomplete": True,
        }


def _verbs(role: str, info: KindInfo) -> list[str]:
    return [verb for verb in sorted(roles.ALL_VERBS) if roles.allows(role, Access(verb, info))]


ACCESS_PATH = "/apis/herder.dev/v1alpha1/access"


class AccessView:
    """``GET ACCESS_PATH``: what the AccessPolicy gives the caller — its role, the rules that name it, and
    its role and Kubernetes groups on each cluster it sees (``herder access show``). An Admin may ask for
    anyone (``?user=NAME``, ``&cluster=NAME``: ``herder access check``)."""

    def __init__(self, store: Store, policy: HerderPolicy) -> None:
        self._store = store
        self._policy = policy

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        request = Request(scope, receive)
        try:
            body = await self._view(request)
            response = Response(media.dumps(body), media_type=media.JSON)
        except Exception as exc:
            response = api_error(exc).response()
        await response(scope, receive, send)

    async def _view(self, request: Request) -> dict[str, Any]:
        caller = await self._policy.authenticate(request)
        name, only = request.query_params.get("user"), request.query_params.get("cluster")
        who = caller
        if name is not None:
            if not roles.at_least(caller.role, "Admin"):
                raise ApiError(
                    403, f"{caller.name} (role {caller.role}) may not check others' access: Admin only"
                )
            found = await tokens.account(self._store, name)
            # Someone the policy names but who has no account (yet): what the rules alone give.
            who = found or Identity(name, "None")
        rules = self._policy.rules
        clusters = []
        for cluster in (await self._store.list(CLUSTER)).items:
            if only is not None and cluster.name != only:
                continue
            if not self._policy.visible(who, CLUSTER, cluster.name, cluster.metadata.labels):
                continue
            clusters.append(
                {
                    "namespace": cluster.namespace,
                    "name": cluster.name,
                    "role": self._policy.cluster_role(who, cluster.name),
                    "kubernetesGroups": list(self._policy.kubernetes_groups(who, cluster.name)),
                }
            )
        if only is not None and not clusters:
            # A cluster that does not exist (or that the identity does not see): what the rules give there.
            grant = rules.grant(who.name, who.labels, only)
            clusters.append(
                {
                    "name": only,
                    "role": effective_role(who.role, grant),
                    "kubernetesGroups": list(kubernetes_groups(who.role, grant)),
                }
            )
        return {
            "kind": "Access",
            "apiVersion": "herder.dev/v1alpha1",
            "user": who.name,
            "role": who.role,
            "labels": dict(who.labels),
            "rules": [
                rule.model_dump(exclude_defaults=True) for rule in rules.rules_naming(who.name, who.labels)
            ],
            "clusters": clusters,
        }
