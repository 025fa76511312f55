"""Kubernetes' RBAC authorizer for the emulated kube-apiserver: whether a user may do a request, decided from
the cluster's Roles, ClusterRoles and bindings as kube-apiserver decides it.

A request is allowed when the user is in ``system:masters`` or when a rule of a role bound to it matches:
ClusterRoleBindings everywhere, RoleBindings in their namespace. A rule matches on verb, API group, resource
(``pods/log`` for a subresource, ``*/log`` too), resource name and, for non-resource requests, URL (a
trailing ``*`` matches a prefix); ``*`` matches anything. An aggregated ClusterRole grants what the roles its
selectors pick grant. Denials carry Kubernetes' reason when a binding names a role that does not exist.

Cheap on the request path: the objects are kept in memory, fed by a watch of the four kinds (as
kube-apiserver's RBAC authorizer reads informer caches); each user's applicable rules are compiled once, and
each decision made once, until an RBAC object changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from herder.emu.cluster.identity import KubeUser
from herder.emu.cluster.rbac import CLUSTER_ROLE, CLUSTER_ROLE_BINDING, KINDS, ROLE, ROLE_BINDING
from herder.resources import KindInfo, Resource
from herder.state.errors import StateError
from herder.state.store import Store

log = logging.getLogger(__name__)

ALL = "*"
DECISIONS_KEPT = 1024
"""Decisions remembered per user and namespace until an RBAC object changes."""


@dataclass(frozen=True)
class Attributes:
    """A request as authorization sees it (Kubernetes' ``authorizer.Attributes``)."""

    verb: str
    namespace: str = ""
    group: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    path: str = ""
    """The URL path of a non-resource request (``resource`` empty)."""

    @property
    def resource_request(self) -> bool:
        return bool(self.resource)

    @property
    def combined_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


@dataclass(frozen=True, slots=True)
class Rule:
    """One PolicyRule, ready to match."""

    verbs: frozenset[str]
    groups: frozenset[str] = frozenset()
    resources: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()
    urls: tuple[str, ...] = ()

    @classmethod
    def of(cls, rule: dict[str, Any]) -> Rule:
        return cls(
            frozenset(rule.get("verbs") or ()),
            frozenset(rule.get("apiGroups") or ()),
            frozenset(rule.get("resources") or ()),
            frozenset(rule.get("resourceNames") or ()),
            tuple(rule.get("nonResourceURLs") or ()),
        )

    def allows(self, a: Attributes) -> bool:
        if ALL not in self.verbs and a.verb not in self.verbs:
            return False
        if not a.resource_request:
            return any(
                u == ALL or u == a.path or (u.endswith(ALL) and a.path.startswith(u[:-1])) for u in self.urls
            )
        if ALL not in self.groups and a.group not in self.groups:
            return False
        if not self._resource_matches(a.combined_resource, a.subresource):
            return False
        return not self.names or a.name in self.names

    def _resource_matches(self, combined: str, subresource: str) -> bool:
        resources = self.resources
        return (
            ALL in resources
            or combined in resources
            or (bool(subresource) and f"*/{subresource}" in resources)
        )

    def to_dict(self) -> dict[str, Any]:
        if self.urls:
            return {"verbs": sorted(self.verbs), "nonResourceURLs": list(self.urls)}
        out: dict[str, Any] = {
            "verbs": sorted(self.verbs),
            "apiGroups": sorted(self.groups),
            "resources": sorted(self.resources),
        }
        if self.names:
            out["resourceNames"] = sorted(self.names)
        return out


@dataclass
class _Binding:
    role_kind: str
    role_name: str
    subjects: tuple[tuple[str, str, str], ...]
    """(kind, name, namespace)"""

    @classmethod
    def of(cls, obj: Resource) -> _Binding:
        extra = obj.model_extra or {}
        ref = extra.get("roleRef") or {}
        subjects = tuple(
            (str(s.get("kind", "")), str(s.get("name", "")), str(s.get("namespace") or obj.namespace or ""))
            for s in extra.get("subjects") or ()
        )
        return cls(str(ref.get("kind", "")), str(ref.get("name", "")), subjects)

    def applies_to(self, user: KubeUser) -> bool:
        for kind, name, namespace in self.subjects:
            if kind == "User" and name == user.name:
                return True
            if kind == "Group" and name in user.groups:
                return True
            if kind == "ServiceAccount" and user.name == f"system:serviceaccount:{namespace}:{name}":
                return True
        return False


@dataclass
class _ClusterRole:
    rules: tuple[Rule, ...]
    labels: dict[str, str]
    selectors: list[dict[str, Any]] | None
    """The aggregationRule's clusterRoleSelectors; None when the role is not aggregated."""


@dataclass
class Grants:
    """What apply to one user in one scope: the rules of its bound roles, and the bindings' faults."""

    rules: list[Rule] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _decided: dict[Attributes, bool] = field(default_factory=dict)
    """The requests decided already: a client asks the same few again and again."""

    def allows(self, a: Attributes) -> bool:
        decided = self._decided.get(a)
        if decided is None:
            if len(self._decided) >= DECISIONS_KEPT:
                self._decided.clear()
            decided = self._decided[a] = any(r.allows(a) for r in self.rules)
        return decided

    def reason(self) -> str:
        """Kubernetes' reason for a denial: only the faults of the bindings, if any."""
        if not self.errors:
            return ""
        return "RBAC: " + (self.errors[0] if len(self.errors) == 1 else "[" + ", ".join(self.errors) + "]")


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector (``matchLabels``, ``matchExpressions``) matches these labels."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or ():
        key, op, values = expression["key"], expression["operator"], expression.get("values") or ()
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


class Authorizer:
    """The RBAC objects of one cluster's API, and the decisions they make."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._roles: dict[tuple[str, str], tuple[Rule, ...]] = {}
        self._cluster_roles: dict[str, _ClusterRole] = {}
        self._role_bindings: dict[str, dict[str, _Binding]] = {}
        self._cluster_role_bindings: dict[str, _Binding] = {}
        self._effective: dict[str, tuple[Rule, ...]] = {}
        self._cluster_grants: dict[tuple[str, tuple[str, ...]], Grants] = {}
        self._namespace_grants: dict[tuple[str, tuple[str, ...], str], Grants] = {}
        self._watches: list[asyncio.Task[None]] = []
        self._starting: asyncio.Future[None] | None = None
        self._started = False
        self.on_change: Callable[[], None] = lambda: None
        """Called on every change of an RBAC object (the aggregation controller follows them)."""

    # --- the objects, from the store ---

    @property
    def started(self) -> bool:
        return self._started

    async def start(self) -> None:
        """Read the RBAC objects, then follow their changes (once; concurrent callers wait for the first)."""
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        await asyncio.shield(self._starting)

    async def _start(self) -> None:
        for info in KINDS:
            listed = await self.store.list(info)
            for obj in listed.items:
                self._apply(info, obj, deleted=False)
            task = asyncio.get_running_loop().create_task(self._follow(info, listed.resource_version))
            self._watches.append(task)
        self._started = True
        self._invalidate()

    async def close(self) -> None:
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()
        for task in self._watches:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._watches.clear()

    async def _follow(self, info: KindInfo, rev: int) -> None:
        while True:
            try:
                async for event in self.store.watch(info, resource_version=rev):
                    self._apply(info, event.object, deleted=event.type == "DELETED")
                    rev = int(event.object.metadata.resource_version or rev)
                    self._invalidate()
            except StateError:
                # Fell behind the retained history: read them all again.
                log.warning("the RBAC watch of %s fell behind; reading them again", info.plural)
                listed = await self.store.list(info)
                self._reset(info)
                for obj in listed.items:
                    self._apply(info, obj, deleted=False)
                rev = listed.resource_version
                self._invalidate()

    def _reset(self, info: KindInfo) -> None:
        if info is ROLE:
            self._roles.clear()
        elif info is CLUSTER_ROLE:
            self._cluster_roles.clear()
        elif info is ROLE_BINDING:
            self._role_bindings.clear()
        else:
            self._cluster_role_bindings.clear()

    def _apply(self, info: KindInfo, obj: Resource, *, deleted: bool) -> None:
        extra = obj.model_extra or {}
        if info is ROLE:
            key = (obj.namespace or "", obj.name)
            if deleted:
                self._roles.pop(key, None)
            else:
                self._roles[key] = tuple(Rule.of(r) for r in extra.get("rules") or ())
        elif info is CLUSTER_ROLE:
            if deleted:
                self._cluster_roles.pop(obj.name, None)
            else:
                aggregation = extra.get("aggregationRule")
                self._cluster_roles[obj.name] = _ClusterRole(
                    tuple(Rule.of(r) for r in extra.get("rules") or ()),
                    dict(obj.metadata.labels),
                    list(aggregation.get("clusterRoleSelectors") or ()) if aggregation is not None else None,
                )
        elif info is ROLE_BINDING:
            bindings = self._role_bindings.setdefault(obj.namespace or "", {})
            if deleted:
                bindings.pop(obj.name, None)
            else:
                bindings[obj.name] = _Binding.of(obj)
        elif info is CLUSTER_ROLE_BINDING:
            if deleted:
                self._cluster_role_bindings.pop(obj.name, None)
            else:
                self._cluster_role_bindings[obj.name] = _Binding.of(obj)

    def _invalidate(self) -> None:
        self._effective.clear()
        self._cluster_grants.clear()
        self._namespace_grants.clear()
        self.on_change()

    # --- roles ---

    def cluster_role_rules(self, name: str) -> tuple[Rule, ...] | None:
        """What a ClusterRole grants (for an aggregated one, what the roles it selects grant); None if there
        is no such role."""
        found = self._effective.get(name)
        if found is None:
            if name not in self._cluster_roles:
                return None
            found = self._effective[name] = tuple(self._aggregate(name, set()))
        return found

    def _aggregate(self, name: str, seen: set[str]) -> Iterator[Rule]:
        role = self._cluster_roles[name]
        if role.selectors is None:
            yield from role.rules
            return
        seen.add(name)
        emitted: set[Rule] = set()
        for other_name, other in sorted(self._cluster_roles.items()):
            if other_name in seen or not any(_selects(s, other.labels) for s in role.selectors):
                continue
            for rule in self._aggregate(other_name, seen):
                if rule not in emitted:
                    emitted.add(rule)
                    yield rule

    def role_rules(self, namespace: str, name: str) -> tuple[Rule, ...]:
        """What a Role grants (nothing if there is no such role)."""
        return self._roles.get((namespace, name), ())

    def stale_aggregations(self) -> Iterator[tuple[str, list[dict[str, Any]]]]:
        """Each aggregated ClusterRole whose ``rules`` do not say what it grants, with the rules they should."""
        for name, role in list(self._cluster_roles.items()):
            if role.selectors is not None:
                granted = self.cluster_role_rules(name) or ()
                if granted != role.rules:
                    yield name, [r.to_dict() for r in granted]

    def _role_rules(self, kind: str, name: str, namespace: str, errors: list[str]) -> Iterable[Rule]:
        if kind == "ClusterRole":
            rules = self.cluster_role_rules(name)
            if rules is None:
                errors.append(f'clusterrole.rbac.authorization.k8s.io "{name}" not found')
            return rules or ()
        found = self._roles.get((namespace, name))
        if found is None:
            errors.append(f'role.rbac.authorization.k8s.io "{name}" not found')
        return found or ()

    # --- decisions ---

    def grants(self, user: KubeUser, namespace: str = "") -> Grants:
        """What applies to the user at the cluster scope and, with ``namespace``, in that namespace too."""
        key = (user.name, user.groups)
        cluster = self._cluster_grants.get(key)
        if cluster is None:
            cluster = self._cluster_grants[key] = Grants()
            for binding in self._cluster_role_bindings.values():
                if binding.applies_to(user):
                    cluster.rules.extend(
                        self._role_rules("ClusterRole", binding.role_name, "", cluster.errors)
                    )
        if not namespace:
            return cluster
        scoped = self._namespace_grants.get((*key, namespace))
        if scoped is None:
            scoped = Grants(list(cluster.rules), list(cluster.errors))
            for binding in (self._role_bindings.get(namespace) or {}).values():
                if binding.applies_to(user):
                    scoped.rules.extend(
                        self._role_rules(binding.role_kind, binding.role_name, namespace, scoped.errors)
                    )
            self._namespace_grants[(*key, namespace)] = scoped
        return scoped

    def authorize(self, user: KubeUser, a: Attributes) -> tuple[bool, str]:
        """Whether ``user`` may do ``a``, and Kubernetes' reason when it may not."""
        if user.master:
            return True, ""
        grants = self.grants(user, a.namespace)
        if grants.allows(a):
            return True, ""
        return False, grants.reason()


def uncovered(owner: Grants, wanted: Iterable[dict[str, Any]]) -> list[str]:
    """The rights ``wanted`` (PolicyRules) grants that ``owner`` does not hold, as Kubernetes lists them when it
    refuses an escalation: what one may grant or bind is only what one holds (Kubernetes' ``Covers``)."""
    missing = []
    for rule in wanted:
        verbs = rule.get("verbs") or ()
        urls = rule.get("nonResourceURLs") or ()
        for url in urls:
            for verb in verbs:
                if not any(_covers_url(o, verb, url) for o in owner.rules):
                    missing.append(f'{{NonResourceURLs:["{url}"], Verbs:["{verb}"]}}')
        if urls:
            continue
        names = rule.get("resourceNames") or [""]
        for group in rule.get("apiGroups") or ():
            for resource in rule.get("resources") or ():
                for name in names:
                    for verb in verbs:
                        if not any(_covers(o, verb, group, resource, name) for o in owner.rules):
                            shown = f', ResourceNames:["{name}"]' if name else ""
                            missing.append(
                                f'{{APIGroups:["{group}"], Resources:["{resource}"]{shown}, Verbs:["{verb}"]}}'
                            )
    return missing


def _covers(owner: Rule, verb: str, group: str, resource: str, name: str) -> bool:
    if ALL not in owner.verbs and verb not in owner.verbs:
        return False
    if ALL not in owner.groups and group not in owner.groups:
        return False
    if ALL not in owner.resources and resource not in owner.resources:
        _, slash, sub = resource.partition("/")
        if not slash or f"*/{sub}" not in owner.resources:
            return False
    return not owner.names or (bool(name) and name in owner.names)


def _covers_url(owner: Rule, verb: str, url: str) -> bool:
    if ALL not in owner.verbs and verb not in owner.verbs:
        return False
    return any(u == url or (u.endswith(ALL) and url.startswith(u.rstrip(ALL))) for u in owner.urls)


def forbidden(user: KubeUser, a: Attributes, reason: str = "") -> str:
    """kube-apiserver's message for a request it refuses (its ``responsewriters.Forbidden``)."""
    if not a.resource_request:
        message = f'forbidden: User "{user.name}" cannot {a.verb} path "{a.path}"'
    else:
        where = f'in the namespace "{a.namespace}"' if a.namespace else "at the cluster scope"
        refusal = f'User "{user.name}" cannot {a.verb} resource "{a.combined_resource}" in API group "{a.group}" {where}'
        qualified = f"{a.resource}.{a.group}" if a.group else a.resource
        message = (
            f'{qualified} "{a.name}" is forbidden: {refusal}'
            if a.name
            else f"{qualified} is forbidden: {refusal}"
        )
    return f"{message}: {reason}" if reason else message
