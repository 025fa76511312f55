"""AccessPolicy: who may do what on which clusters, in Omni's own format.

One cluster-scoped object named ``access-policy``. Its ``spec`` is Omni's AccessPolicy spec unchanged, so
an Omni policy file's ``spec`` applies as it is: user groups (users by ``name``, fnmatch ``match`` or
``labelselectors``), cluster groups (clusters by ``name`` or ``match``), rules that give the users of
some groups a role on the clusters of others (and Kubernetes groups to impersonate there), and tests
that must hold for every write. A rule only raises a role: an identity's role on a cluster is the
highest of its own and those of every rule matching it there (``herder.api.cluster_access``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from herder.resources.configuration import GROUP, VERSION
from herder.resources.registry import KindInfo, PrinterColumn

ACCESS_POLICY_NAME = "access-policy"
GROUP_PREFIX = "group/"

PolicyRole = Literal["None", "Reader", "Operator", "Admin"]

_OMNI = ConfigDict(extra="forbid", populate_by_name=True)


class UserMatch(BaseModel):
    """One way to name users: exactly, by fnmatch pattern, or by label selectors (all must hold)."""

    model_config = _OMNI

    name: str | None = None
    match: str | None = None
    labelselectors: list[str] | None = None

    @model_validator(mode="after")
    def _one_way(self) -> UserMatch:
        given = [k for k in ("name", "match", "labelselectors") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"exactly one of name, match and labelselectors, not {', '.join(given) or 'none'}"
            )
        return self


class UserGroup(BaseModel):
    model_config = _OMNI

    users: list[UserMatch] = []


class ClusterMatch(BaseModel):
    """One way to name clusters: exactly, or by fnmatch pattern."""

    model_config = _OMNI

    name: str | None = None
    match: str | None = None

    @model_validator(mode="after")
    def _one_way(self) -> ClusterMatch:
        given = [k for k in ("name", "match") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"exactly one of name and match, not {', '.join(given) or 'none'}")
        return self


class ClusterGroup(BaseModel):
    model_config = _OMNI

    clusters: list[ClusterMatch] = []


class Impersonate(BaseModel):
    model_config = _OMNI

    groups: list[str] = []


class KubernetesAccess(BaseModel):
    model_config = _OMNI

    impersonate: Impersonate = Impersonate()


class PolicyRule(BaseModel):
    """The users (``group/NAME`` or a user's name) get ``role`` on the clusters (``group/NAME`` or a
    cluster's name), and Kubernetes groups to impersonate there."""

    model_config = _OMNI

    users: list[str] = []
    clusters: list[str] = []
    role: PolicyRole = "None"
    kubernetes: KubernetesAccess = KubernetesAccess()


class TestUser(BaseModel):
    model_config = _OMNI

    name: str
    labels: dict[str, str] = {}


class TestCluster(BaseModel):
    model_config = _OMNI

    name: str


class Expected(BaseModel):
    model_config = _OMNI

    role: PolicyRole = "None"
    kubernetes: KubernetesAccess = KubernetesAccess()


class PolicyTest(BaseModel):
    """What the policy must give one user on one cluster: a write that breaks it is refused."""

    model_config = _OMNI

    name: str
    user: TestUser
    cluster: TestCluster
    expected: Expected = Expected()


class AccessPolicySpec(BaseModel):
    model_config = _OMNI

    usergroups: dict[str, UserGroup] = {}
    clustergroups: dict[str, ClusterGroup] = {}
    rules: list[PolicyRule] = []
    tests: list[PolicyTest] = []

    @model_validator(mode="after")
    def _groups_known(self) -> AccessPolicySpec:
        problems = []
        for i, rule in enumerate(self.rules):
            for what, entries, known in (
                ("users", rule.users, self.usergroups),
                ("clusters", rule.clusters, self.clustergroups),
            ):
                for entry in entries:
                    group = entry.removeprefix(GROUP_PREFIX)
                    if entry.startswith(GROUP_PREFIX) and group not in known:
                        kind = "user" if what == "users" else "cluster"
                        problems.append(f"rules[{i}].{what}: {entry}: no {kind} group {group!r} is defined")
        if problems:
            raise ValueError("; ".join(problems))
        return self


ACCESS_POLICY = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="AccessPolicy",
    plural="accesspolicies",
    namespaced=False,
    spec_model=AccessPolicySpec,
    categories=("herder",),
    printer_columns=(
        PrinterColumn(
            "Rules", ".spec.rules", compute=lambda obj: len((obj.get("spec") or {}).get("rules") or [])
        ),
        PrinterColumn(
            "Tests", ".spec.tests", compute=lambda obj: len((obj.get("spec") or {}).get("tests") or [])
        ),
    ),
    description=(
        f"Who may do what on which clusters (Omni's AccessPolicy format); one object, {ACCESS_POLICY_NAME!r}. "
        "Rules only raise roles; its tests must hold for every write."
    ),
)
