"""The AccessPolicy's evaluation: Omni's user groups (name, fnmatch, label selectors), cluster groups,
rules that only raise roles, Kubernetes groups, and the tests that refuse a write."""

from __future__ import annotations

from typing import Any

import pytest

from herder.api.cluster_access import (
    ClusterAccess,
    Grant,
    check_policy,
    effective_role,
    kubernetes_groups,
)
from herder.resources import InvalidObject, Resource
from herder.resources.access_policy import ACCESS_POLICY, AccessPolicySpec

SPEC: dict[str, Any] = {
    "usergroups": {
        "ops": {"users": [{"name": "alice@example.com"}, {"match": "serviceaccount:ops-*"}]},
        "level-2": {"users": [{"labelselectors": ["level=2", "!suspended"]}]},
    },
    "clustergroups": {
        "dev": {"clusters": [{"match": "dev-*"}]},
        "prod": {"clusters": [{"name": "prod"}, {"match": "prod-?"}]},
    },
    "rules": [
        {"users": ["group/ops"], "clusters": ["group/dev"], "role": "Admin"},
        {
            "users": ["group/level-2", "bob@example.com"],
            "clusters": ["group/prod"],
            "role": "Reader",
            "kubernetes": {"impersonate": {"groups": ["read-only"]}},
        },
        {
            "users": ["group/level-2"],
            "clusters": ["prod-1"],
            "kubernetes": {"impersonate": {"groups": ["deployers"]}},
        },
    ],
}


def access(spec: dict[str, Any] = SPEC) -> ClusterAccess:
    return ClusterAccess(AccessPolicySpec.model_validate(spec))


@pytest.mark.parametrize(
    ("user", "labels", "cluster", "role", "groups"),
    [
        ("alice@example.com", {}, "dev-1", "Admin", ()),
        ("serviceaccount:ops-ci", {}, "dev-anything", "Admin", ()),
        ("serviceaccount:opsci", {}, "dev-1", "None", ()),  # the pattern wants ops-
        ("alice@example.com", {}, "prod", "None", ()),
        ("carol", {"level": "2"}, "prod", "Reader", ("read-only",)),
        ("carol", {"level": "2"}, "prod-1", "Reader", ("read-only", "deployers")),  # groups add up
        ("carol", {"level": "2", "suspended": "yes"}, "prod", "None", ()),  # every selector must hold
        ("carol", {"level": "3"}, "prod", "None", ()),
        ("bob@example.com", {}, "prod-2", "Reader", ("read-only",)),
        ("bob@example.com", {}, "prod-22", "None", ()),
    ],
)
def test_grants(user: str, labels: dict[str, str], cluster: str, role: str, groups: tuple[str, ...]) -> None:
    assert access().grant(user, labels, cluster) == Grant(role, groups)


def test_a_rule_only_raises_a_role_and_never_touches_providers_or_support() -> None:
    assert effective_role("Operator", Grant("Reader")) == "Operator"
    assert effective_role("None", Grant("Reader")) == "Reader"
    assert effective_role("Reader", Grant("Admin")) == "Admin"
    assert effective_role("InfraProvider", Grant("Admin")) == "InfraProvider"
    assert effective_role("Support", Grant("None")) == "Support"


def test_kubernetes_groups_follow_omni() -> None:
    # Operator and above administer every cluster, whatever rules add.
    assert kubernetes_groups("Operator", Grant("None", ("read-only",))) == ("read-only", "system:masters")
    # A Reader without a rule's groups reads; with them, it acts in those only.
    assert kubernetes_groups("Reader", Grant()) == ("herder:readers",)
    assert kubernetes_groups("Reader", Grant("Reader", ("read-only",))) == ("read-only",)
    # None: only what rules give, and nothing without them.
    assert kubernetes_groups("None", Grant("Operator")) == ()
    assert kubernetes_groups("None", Grant("Operator", ("ops",))) == ("ops",)
    assert kubernetes_groups("InfraProvider", Grant("Admin", ("x",))) == ()


def policy(spec: dict[str, Any], name: str = "access-policy") -> Resource:
    return ACCESS_POLICY.validate(
        Resource.model_validate(
            {
                "apiVersion": ACCESS_POLICY.api_version,
                "kind": "AccessPolicy",
                "metadata": {"name": name},
                "spec": spec,
            }
        )
    )


def test_failing_tests_refuse_the_write_saying_what_they_expected_and_got() -> None:
    spec = {
        **SPEC,
        "tests": [
            {
                "name": "carol reads prod",
                "user": {"name": "carol", "labels": {"level": "2"}},
                "cluster": {"name": "prod"},
                "expected": {"role": "Reader", "kubernetes": {"impersonate": {"groups": ["read-only"]}}},
            },
            {
                "name": "alice runs prod",
                "user": {"name": "alice@example.com"},
                "cluster": {"name": "prod"},
                "expected": {"role": "Admin"},
            },
        ],
    }
    [problem] = check_policy(policy(spec))
    assert problem.field == "spec.tests"
    assert problem.message == (
        "test 'alice runs prod': expected role Admin and groups [], got role None and groups []"
    )
    assert check_policy(policy({**spec, "tests": spec["tests"][:1]})) == []


def test_one_name_a_known_group_and_one_way_to_name_users() -> None:
    assert check_policy(policy(SPEC, "other"))[0].field == "metadata.name"
    with pytest.raises(InvalidObject, match="no user group 'nobody' is defined"):
        policy({**SPEC, "rules": [{"users": ["group/nobody"], "clusters": ["prod"], "role": "Reader"}]})
    with pytest.raises(InvalidObject, match="exactly one of name, match and labelselectors"):
        policy({"usergroups": {"x": {"users": [{"name": "a", "match": "b*"}]}}})
    [bad] = check_policy(policy({"usergroups": {"x": {"users": [{"labelselectors": ["a in (b"]}]}}}))
    assert bad.field == "spec.usergroups.x.users[0].labelselectors"
