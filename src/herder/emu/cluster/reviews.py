"""The questions a caller asks the emulated kube-apiserver about itself (``krm.reviews``: whoami, can-i,
can-i --list), decided by the cluster's RBAC. Each needs ``create`` on its resource, which
``system:basic-user`` grants every authenticated user.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from herder.emu.cluster.access import RbacPolicy
from herder.emu.cluster.authorizer import Attributes
from herder.emu.cluster.identity import KubeUser
from herder.krm.reviews import Reviews


class RbacReviews(Reviews[KubeUser]):
    """The reviews of the emulated cluster, decided by its RBAC."""

    def __init__(self, policy: RbacPolicy) -> None:
        self.policy = policy

    async def authenticate(self, request: Request) -> KubeUser:
        return await self.policy.authenticate(request)

    def may_ask(self, who: KubeUser, group: str, plural: str) -> None:
        self.policy.check(who, Attributes("create", group=group, resource=plural))

    def user_info(self, who: KubeUser) -> dict[str, Any]:
        return _user_info(who)

    async def access(self, who: KubeUser, spec: dict[str, Any]) -> dict[str, Any]:
        return self._access(who, spec)

    async def rules(self, who: KubeUser, spec: dict[str, Any]) -> dict[str, Any]:
        return self._rules(who, spec)

    def _access(self, who: KubeUser, spec: dict[str, Any]) -> dict[str, Any]:
        resource, other = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        if resource is not None:
            a = Attributes(
                str(resource.get("verb") or ""),
                namespace=str(resource.get("namespace") or ""),
                group=str(resource.get("group") or ""),
                resource=str(resource.get("resource") or ""),
                subresource=str(resource.get("subresource") or ""),
                name=str(resource.get("name") or ""),
            )
            if not a.resource:
                a = Attributes(a.verb, path="")  # no resource: nothing matches, as in Kubernetes
        else:
            assert other is not None
            a = Attributes(str(other.get("verb") or ""), path=str(other.get("path") or ""))
        allowed, reason = self.policy.authorizer.authorize(who, a)
        status: dict[str, Any] = {"allowed": allowed}
        if reason:
            status["reason"] = reason
        return status

    def _rules(self, who: KubeUser, spec: dict[str, Any]) -> dict[str, Any]:
        namespace = str(spec.get("namespace") or "")
        grants = self.policy.authorizer.grants(who, namespace)
        resource_rules: list[dict[str, Any]] = []
        url_rules: list[dict[str, Any]] = []
        for rule in grants.rules:
            shown = rule.to_dict()
            (url_rules if rule.urls else resource_rules).append(shown)
        status: dict[str, Any] = {
            "resourceRules": resource_rules,
            "nonResourceRules": url_rules,
            "incomplete": False,
        }
        if grants.errors:
            status["evaluationError"] = ", ".join(grants.errors)
        return status


def _user_info(who: KubeUser) -> dict[str, Any]:
    info: dict[str, Any] = {"username": who.name, "groups": list(who.groups)}
    if who.uid:
        info["uid"] = who.uid
    if who.extra:
        info["extra"] = {k: list(v) for k, v in who.extra}
    return info
