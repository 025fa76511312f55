"""The emulated kube-apiserver's access policy on ``krm``: authentication (``authentication``) and RBAC
(``authorizer``) of every request, with Kubernetes' 403 wording; RBAC's own rule that one grants or binds
only the rights one holds (unless allowed ``escalate`` or ``bind``); a binding's role reference fixed once set.
Nothing is hidden and nothing is recorded.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from herder.emu.cluster.authentication import certificate_user, impersonated
from herder.emu.cluster.authorizer import Attributes, Authorizer, forbidden, uncovered
from herder.emu.cluster.identity import KubeUser
from herder.emu.cluster.rbac import CLUSTER_ROLE, GROUP, ROLE, ROLE_BINDING
from herder.krm.policy import Access, AllowAll, Denied, Identity
from herder.resources import FieldError, InvalidObject, KindInfo, Resource

_NON_RESOURCE_DEPTH = {"api": 2, "apis": 3}
"""How many path segments a discovery path has at most under /api and /apis (``/apis/GROUP/VERSION``)."""


def is_resource_path(path: str) -> bool:
    """Whether a path names resources (``/api/v1/pods``), not discovery (``/api/v1``) or another document."""
    parts = path.strip("/").split("/")
    depth = _NON_RESOURCE_DEPTH.get(parts[0])
    return depth is not None and len(parts) > depth


def _writes_rbac(request: Request) -> bool:
    return request.method != "GET" and request.url.path.startswith(f"/apis/{GROUP}/")


def attributes(access: Access, obj: Resource | None = None) -> Attributes:
    """A krm access as Kubernetes' authorization sees it: a create names no object (the name is in its body)."""
    name = "" if access.verb == "create" else access.name or ""
    return Attributes(
        access.verb,
        namespace=access.namespace or "",
        group=access.kind.group,
        resource=access.kind.plural,
        subresource=access.subresource or "",
        name=name,
    )


class RbacPolicy(AllowAll):
    """Who calls, and whether RBAC lets them (nothing hidden, redacted or recorded: ``AllowAll``'s)."""

    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer

    async def authenticate(self, request: Request) -> KubeUser:
        """The user of a request (impersonation applied); a non-resource request is authorized here too.

        The RBAC objects are read the first time they matter: for a caller outside ``system:masters``, or a
        write of one of them (so that aggregation follows it). Until then a cluster pays nothing for RBAC
        that only herder and admin kubeconfigs use."""
        requestor = certificate_user(request)
        if not requestor.master or _writes_rbac(request):
            await self._rbac_read()
        who = impersonated(requestor, request.headers, self.authorizer.authorize)
        if not who.master:
            await self._rbac_read()
        path = request.url.path
        if not is_resource_path(path):
            method = request.method
            self.check(who, Attributes(method.lower(), path=path))
        return who

    async def _rbac_read(self) -> None:
        if not self.authorizer.started:
            await self.authorizer.start()

    def check(self, who: KubeUser, a: Attributes) -> None:
        """Raise Kubernetes' 403 unless ``who`` may do ``a``."""
        allowed, reason = self.authorizer.authorize(who, a)
        if not allowed:
            raise Denied(forbidden(who, a, reason))

    def authorize(self, who: Identity, access: Access, obj: Resource | None = None) -> None:
        if obj is not None and access.verb == "deletecollection":
            return  # Kubernetes authorizes a deletecollection once, for the collection
        assert isinstance(who, KubeUser)
        self.check(who, attributes(access, obj))

    def admit(self, who: Identity, access: Access, current: Resource | None, new: Resource) -> None:
        assert isinstance(who, KubeUser)
        info = access.kind
        extra = new.model_extra or {}
        if info in (ROLE, CLUSTER_ROLE):
            self._no_escalation(who, info, new, extra.get("rules") or [], "escalate")
            if extra.get("aggregationRule") is not None:
                # Its rules will be everything it aggregates: only who holds every right may write one.
                everything = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
                self._no_escalation(who, info, new, everything, "escalate")
        elif info.group == GROUP:  # a binding
            ref = extra.get("roleRef") or {}
            if current is not None and (current.model_extra or {}).get("roleRef") != ref:
                raise InvalidObject(info.kind, new.name, [FieldError("roleRef", "cannot change roleRef")])
            self._may_bind(who, info, new, ref)

    def _may_bind(self, who: KubeUser, info: KindInfo, binding: Resource, ref: dict[str, str]) -> None:
        if who.master or self._allowed(
            who, "bind", ref.get("kind", ""), ref.get("name", ""), binding.namespace
        ):
            return
        namespace = binding.namespace or "" if info is ROLE_BINDING else ""
        if ref.get("kind") == "ClusterRole":
            rules = self.authorizer.cluster_role_rules(ref.get("name", "")) or ()
        else:
            rules = self.authorizer.role_rules(namespace, ref.get("name", ""))
        self._refuse_uncovered(who, info, binding, [r.to_dict() for r in rules])

    def _no_escalation(
        self, who: KubeUser, info: KindInfo, role: Resource, rules: list[dict[str, Any]], verb: str
    ) -> None:
        if who.master or self._allowed(who, verb, info.kind, role.name, role.namespace):
            return
        self._refuse_uncovered(who, info, role, rules)

    def _refuse_uncovered(
        self, who: KubeUser, info: KindInfo, obj: Resource, rules: list[dict[str, Any]]
    ) -> None:
        missing = uncovered(self.authorizer.grants(who, obj.namespace or ""), rules)
        if missing:
            groups = " ".join(f'"{g}"' for g in who.groups)
            raise Denied(
                f'{info.plural}.{GROUP} "{obj.name}" is forbidden: user "{who.name}" (groups=[{groups}]) is '
                f"attempting to grant RBAC permissions not currently held:\n" + "\n".join(missing)
            )

    def _allowed(self, who: KubeUser, verb: str, kind: str, name: str, namespace: str | None) -> bool:
        resource = "clusterroles" if kind == "ClusterRole" else "roles"
        a = Attributes(verb, namespace=namespace or "", group=GROUP, resource=resource, name=name)
        return self.authorizer.authorize(who, a)[0]
