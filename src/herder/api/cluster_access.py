"""The role of an identity on a cluster: its own, raised by the rules of the AccessPolicy that match it.

``ClusterAccess`` is one AccessPolicy compiled: which rules match an identity (by name, fnmatch pattern
or label selectors, through user groups) and which clusters a rule names (by name or pattern, through
cluster groups). ``grant`` gives what the rules give one identity on one cluster — the highest of their
roles and the union of their Kubernetes groups — and ``effective_role`` combines it with the identity's
own role, which a rule never lowers. The policy's tests run against it on every write
(``check_tests``). ``AccessPolicies`` keeps the current policy of a store, compiled, from a watch, so
that every request decides from memory.

Only identities on the account's ladder (None, Reader, Operator, Admin) get roles from rules: an
InfraProvider is scoped to its own objects and Support sees everything anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from herder.resources import FieldError, InvalidObject, Resource
from herder.resources.access import READERS_GROUP
from herder.resources.access_policy import (
    ACCESS_POLICY,
    ACCESS_POLICY_NAME,
    GROUP_PREFIX,
    AccessPolicySpec,
    ClusterMatch,
    PolicyRule,
    UserMatch,
)
from herder.state.admission import Admission, Write
from herder.state.errors import Gone, Invalid, NotFound
from herder.state.selectors import LabelSelector
from herder.state.store import Store

log = logging.getLogger(__name__)

LADDER = ("None", "Reader", "Operator", "Admin")
_RANK = {role: rank for rank, role in enumerate(LADDER)}
# Roles a rule may raise: the ones on the account's ladder.
_RAISED = frozenset(LADDER)


def higher(a: str, b: str) -> str:
    return a if _RANK.get(a, 0) >= _RANK.get(b, 0) else b


@dataclass(frozen=True)
class Grant:
    """What the rules give one identity on one cluster."""

    role: str = "None"
    groups: tuple[str, ...] = ()


NO_GRANT = Grant()


class _Users:
    """The users one entry of a user group names."""

    def __init__(self, entry: UserMatch) -> None:
        self._entry = entry
        self._selector = (
            LabelSelector.parse(",".join(entry.labelselectors)) if entry.labelselectors is not None else None
        )

    def match(self, name: str, labels: Mapping[str, str]) -> bool:
        if self._entry.name is not None:
            return name == self._entry.name
        if self._entry.match is not None:
            return fnmatch.fnmatchcase(name, self._entry.match)
        assert self._selector is not None
        return self._selector.matches(labels)


def _cluster_matches(entry: ClusterMatch, cluster: str) -> bool:
    if entry.name is not None:
        return cluster == entry.name
    assert entry.match is not None
    return fnmatch.fnmatchcase(cluster, entry.match)


@dataclass(frozen=True)
class _Rule:
    users: tuple[str, ...]
    user_groups: tuple[str, ...]
    clusters: tuple[ClusterMatch, ...]
    role: str
    groups: tuple[str, ...]


class ClusterAccess:
    """One AccessPolicy, compiled."""

    def __init__(self, spec: AccessPolicySpec | None = None) -> None:
        self.spec = spec or AccessPolicySpec()
        self._groups = {
            name: [_Users(entry) for entry in group.users] for name, group in self.spec.usergroups.items()
        }
        self._rules = [self._compile(rule) for rule in self.spec.rules]
        self._by_identity: dict[tuple[str, tuple[tuple[str, str], ...]], list[_Rule]] = {}

    def _compile(self, rule: PolicyRule) -> _Rule:
        clusters: list[ClusterMatch] = []
        for entry in rule.clusters:
            if entry.startswith(GROUP_PREFIX):
                clusters += self.spec.clustergroups[entry.removeprefix(GROUP_PREFIX)].clusters
            else:
                clusters.append(ClusterMatch(name=entry))
        return _Rule(
            users=tuple(u for u in rule.users if not u.startswith(GROUP_PREFIX)),
            user_groups=tuple(u.removeprefix(GROUP_PREFIX) for u in rule.users if u.startswith(GROUP_PREFIX)),
            clusters=tuple(clusters),
            role=rule.role,
            groups=tuple(rule.kubernetes.impersonate.groups),
        )

    @cached_property
    def empty(self) -> bool:
        return not self._rules

    def _rules_of(self, name: str, labels: Mapping[str, str]) -> list[_Rule]:
        """The rules that name this identity (cached: an identity asks on every request)."""
        key = (name, tuple(sorted(labels.items())))
        found = self._by_identity.get(key)
        if found is None:
            groups = {g for g, users in self._groups.items() if any(u.match(name, labels) for u in users)}
            found = [r for r in self._rules if name in r.users or groups.intersection(r.user_groups)]
            if len(self._by_identity) > 10_000:
                self._by_identity.clear()
            self._by_identity[key] = found
        return found

    def grant(self, name: str, labels: Mapping[str, str], cluster: str) -> Grant:
        role, groups = "None", []
        for rule in self._rules_of(name, labels):
            if any(_cluster_matches(c, cluster) for c in rule.clusters):
                role = higher(role, rule.role)
                groups += [g for g in rule.groups if g not in groups]
        return Grant(role, tuple(groups)) if role != "None" or groups else NO_GRANT

    def rules_naming(self, name: str, labels: Mapping[str, str]) -> list[PolicyRule]:
        """The policy's rules that name this identity (through a user group or by name)."""
        matched = {id(rule) for rule in self._rules_of(name, labels)}
        return [
            source for source, rule in zip(self.spec.rules, self._rules, strict=True) if id(rule) in matched
        ]

    def best(self, name: str, labels: Mapping[str, str]) -> str:
        """The highest role any rule gives this identity on any cluster."""
        role = "None"
        for rule in self._rules_of(name, labels):
            role = higher(role, rule.role)
        return role

    def check_tests(self) -> list[str]:
        """What each failing test expected and got."""
        failures = []
        for test in self.spec.tests:
            got = self.grant(test.user.name, test.user.labels, test.cluster.name)
            want_groups = sorted(test.expected.kubernetes.impersonate.groups)
            if got.role != test.expected.role or sorted(got.groups) != want_groups:
                failures.append(
                    f"test {test.name!r}: expected role {test.expected.role} and groups {want_groups}, "
                    f"got role {got.role} and groups {sorted(got.groups)}"
                )
        return failures


# Kubernetes groups herder impersonates beyond the rules': identities whose own role is Operator or above
# administer every cluster (as in Omni); a Reader without a rule's groups reads (ClusterRole view, which
# herder binds to READERS_GROUP in every cluster it makes).
MASTERS_GROUP = "system:masters"
_MASTERS_ROLES = frozenset({"Operator", "Admin", "Support"})


def kubernetes_groups(own: str, grant: Grant) -> tuple[str, ...]:
    """The Kubernetes groups an identity of role ``own`` acts in, on a cluster where ``grant`` holds;
    none: it has no Kubernetes access there."""
    if own == "InfraProvider":
        return ()
    groups = list(grant.groups)
    if own in _MASTERS_ROLES and MASTERS_GROUP not in groups:
        groups.append(MASTERS_GROUP)
    if own == "Reader" and not groups:
        groups.append(READERS_GROUP)
    return tuple(groups)


def effective_role(own: str, grant: Grant) -> str:
    """An identity's role on a cluster: its own, or higher where a rule raises it."""
    if own not in _RAISED:
        return own  # InfraProvider and Support: never changed by rules
    return higher(own, grant.role)


class AccessPolicies:
    """The store's current AccessPolicy, compiled, kept from a watch of the kind."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.current = ClusterAccess()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        rev = await self._reload()
        self._task = asyncio.create_task(self._follow(rev), name="access-policy")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _take(self, obj: Resource | None) -> None:
        spec = ACCESS_POLICY.spec_of(obj, AccessPolicySpec) if obj is not None else None
        self.current = ClusterAccess(spec)

    async def _reload(self) -> int:
        """Read the policy; the revision to watch from (taken first: a change meanwhile comes again)."""
        rev = await self._store.revision()
        try:
            self._take(await self._store.get(ACCESS_POLICY, ACCESS_POLICY_NAME))
        except NotFound:
            self._take(None)
        return rev

    async def _follow(self, rev: int) -> None:
        while True:
            try:
                async for event in self._store.watch(ACCESS_POLICY, resource_version=rev):
                    rev = event.object.resource_version
                    if event.type != "BOOKMARK" and event.object.name == ACCESS_POLICY_NAME:
                        self._take(None if event.type == "DELETED" else event.object)
            except Gone:
                rev = await self._reload()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(
                    "watch of the access policy failed: %s; reading it again", exc or type(exc).__name__
                )
                await asyncio.sleep(1)
                rev = await self._reload()


def check_policy(obj: Resource) -> list[FieldError]:
    """Why an AccessPolicy may not be written: its name, a label selector that does not parse, then its
    failing tests (each naming what it expected and what the policy gives)."""
    if obj.name != ACCESS_POLICY_NAME:
        return [FieldError("metadata.name", f"the access policy is one object, named {ACCESS_POLICY_NAME!r}")]
    spec = ACCESS_POLICY.spec_of(obj, AccessPolicySpec)
    problems = []
    for group, users in spec.usergroups.items():
        for i, entry in enumerate(users.users):
            if entry.labelselectors is not None:
                try:
                    LabelSelector.parse(",".join(entry.labelselectors))
                except Invalid as exc:
                    problems.append(
                        FieldError(f"spec.usergroups.{group}.users[{i}].labelselectors", str(exc))
                    )
    if problems:
        return problems
    return [FieldError("spec.tests", failure) for failure in ClusterAccess(spec).check_tests()]


def register_admission(admission: Admission) -> None:
    """Refuse every write of an AccessPolicy that ``check_policy`` finds fault with (422)."""

    async def check(write: Write) -> None:
        if write.new is not None and (problems := check_policy(write.new)):
            raise InvalidObject(ACCESS_POLICY.kind, write.new.name, problems)

    admission.register(ACCESS_POLICY.kind, check)
