"""The emulated kube-apiserver's RBAC decisions, on an in-memory store: rule matching as Kubernetes matches
(subresources, ``*/log``, resource names, non-resource URL prefixes), aggregation of the default roles, the
reason a denial gives, and the refusal to grant what one does not hold."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from herder.emu.cluster import rbac
from herder.emu.cluster.access import RbacPolicy
from herder.emu.cluster.aggregation import Aggregation
from herder.emu.cluster.authorizer import Attributes, Authorizer
from herder.emu.cluster.identity import user
from herder.emu.cluster.rbac_defaults import CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES
from herder.krm.policy import Access, Denied
from herder.resources import InvalidObject, KindRegistry, Resource
from herder.state.memory import MemoryBackend
from herder.state.store import Store
from tests.emu.clusters import eventually

GROUP = "rbac.authorization.k8s.io"


def _role(name: str, rules: list[dict[str, Any]], **labels: str) -> Resource:
    return Resource.from_dict(
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels},
            "rules": rules,
        }
    )


def _binding(
    name: str, role: str, subject: dict[str, str], namespace: str = "", kind: str = "ClusterRole"
) -> Resource:
    return Resource.from_dict(
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": "RoleBinding" if namespace else "ClusterRoleBinding",
            "metadata": {"name": name, **({"namespace": namespace} if namespace else {})},
            "roleRef": {"apiGroup": GROUP, "kind": kind, "name": role},
            "subjects": [subject],
        }
    )


@pytest.fixture
async def authorizer() -> AsyncIterator[Authorizer]:
    registry = KindRegistry(rbac.KINDS)
    async with Store(MemoryBackend(), registry) as store:
        for obj in (*CLUSTER_ROLES, *CLUSTER_ROLE_BINDINGS):
            await store.create(Resource.from_dict(obj))
        found = Authorizer(store)
        await found.start()
        try:
            yield found
        finally:
            await found.close()


async def _settled(authorizer: Authorizer, check: Any) -> None:
    """Wait for the authorizer's watch to take the store's writes in."""
    await eventually(check, timeout=5)


async def test_rules_match_as_kubernetes_matches_them(authorizer: Authorizer) -> None:
    rules = [
        {"apiGroups": [""], "resources": ["*/log"], "verbs": ["get"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["*"], "resourceNames": ["web"]},
        {"nonResourceURLs": ["/metrics", "/logs/*"], "verbs": ["get"]},
    ]
    await authorizer.store.create(_role("reader", rules))
    await authorizer.store.create(_binding("reader", "reader", {"kind": "User", "name": "alice"}))
    alice = user("alice", [])
    pod_log = Attributes("get", "default", "", "pods", "log", "web")
    await _settled(authorizer, lambda: authorizer.authorize(alice, pod_log)[0])

    def allowed(**attributes: Any) -> bool:
        return authorizer.authorize(alice, Attributes(**attributes))[0]

    assert allowed(verb="get", namespace="ns", resource="nodes", subresource="log")
    assert not allowed(verb="get", namespace="default", resource="pods")
    assert allowed(verb="delete", namespace="x", group="apps", resource="deployments", name="web")
    assert not allowed(verb="delete", namespace="x", group="apps", resource="deployments", name="db")
    assert not allowed(verb="list", namespace="x", group="apps", resource="deployments")
    assert allowed(verb="get", path="/metrics") and allowed(verb="get", path="/logs/kubelet")
    assert not allowed(verb="get", path="/metricsx") and not allowed(verb="post", path="/metrics")
    # What every authenticated user may: discovery, and asking about oneself.
    assert allowed(verb="get", path="/apis/apps")
    assert allowed(verb="create", group="authorization.k8s.io", resource="selfsubjectaccessreviews")
    assert authorizer.authorize(user("x", ["system:masters"]), Attributes("delete", resource="nodes"))[0]


async def test_default_roles_aggregate_and_a_labelled_role_joins_them(authorizer: Authorizer) -> None:
    bob = user("bob", ["devs"])
    await authorizer.store.create(
        _binding("devs-edit", "edit", {"kind": "Group", "name": "devs", "apiGroup": GROUP}, namespace="apps")
    )
    get_pods = Attributes("get", "apps", "", "pods")
    await _settled(authorizer, lambda: authorizer.authorize(bob, get_pods)[0])
    assert authorizer.authorize(bob, Attributes("create", "apps", "", "pods", "exec", "web"))[0]
    assert not authorizer.authorize(bob, Attributes("create", "apps", GROUP, "roles"))[
        0
    ]  # admin's, not edit's
    assert not authorizer.authorize(bob, Attributes("get", "other", "", "pods"))[0]

    # A ClusterRole labelled to aggregate into view adds its rules to view, and through view to edit.
    widgets = {"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get"]}
    await authorizer.store.create(_role("widgets", [widgets], **{f"{GROUP}/aggregate-to-view": "true"}))
    read_widgets = Attributes("get", "apps", "example.com", "widgets")
    await _settled(authorizer, lambda: authorizer.authorize(bob, read_widgets)[0])
    assert any(r.resources == {"widgets"} for r in authorizer.cluster_role_rules("admin") or ())

    # The aggregation controller writes what the aggregated roles grant into their rules.
    controller = Aggregation(authorizer.store, authorizer)
    await controller.aggregate()
    view = await authorizer.store.get(rbac.CLUSTER_ROLE, "view")
    assert widgets in (view.model_extra or {})["rules"]


async def test_a_denial_names_a_role_a_binding_lacks(authorizer: Authorizer) -> None:
    await authorizer.store.create(
        _binding("ghost", "nope", {"kind": "User", "name": "carol"}, namespace="default", kind="Role")
    )
    carol = user("carol", [])
    get = Attributes("get", "default", "", "pods", name="web")

    def reason() -> str:
        return authorizer.authorize(carol, get)[1]

    await _settled(authorizer, lambda: bool(reason()))
    assert reason() == 'RBAC: role.rbac.authorization.k8s.io "nope" not found'


async def test_service_account_subjects_match_their_user_name(authorizer: Authorizer) -> None:
    subject = {"kind": "ServiceAccount", "name": "ci", "namespace": "build"}
    await authorizer.store.create(_binding("ci", "view", subject))
    ci = user("system:serviceaccount:build:ci", ["system:serviceaccounts"])
    await _settled(authorizer, lambda: authorizer.authorize(ci, Attributes("list", "x", "", "pods"))[0])


async def test_one_grants_or_binds_only_what_one_holds(authorizer: Authorizer) -> None:
    policy = RbacPolicy(authorizer)
    await authorizer.store.create(
        _binding("team-admin", "admin", {"kind": "User", "name": "erin"}, namespace="team")
    )
    erin = user("erin", [])
    await _settled(
        authorizer, lambda: authorizer.authorize(erin, Attributes("create", "team", GROUP, "roles"))[0]
    )

    def write(kind: rbac.RbacKind, obj: Resource, current: Resource | None = None) -> None:
        policy.admit(erin, Access("create", kind, "team", obj.name), current, obj)

    pods_reader = Resource.from_dict(
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": "Role",
            "metadata": {"name": "pods", "namespace": "team"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
        }
    )
    write(rbac.ROLE, pods_reader)
    nodes = pods_reader.clone()
    (nodes.model_extra or {})["rules"] = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["delete"]}]
    with pytest.raises(Denied, match=r'attempting to grant RBAC permissions not currently held:\n.*"nodes"'):
        write(rbac.ROLE, nodes)
    subject = {"kind": "User", "name": "frank"}
    write(rbac.ROLE_BINDING, _binding("frank-view", "view", subject, namespace="team"))
    with pytest.raises(Denied, match="not currently held"):
        write(rbac.ROLE_BINDING, _binding("frank-admin", "cluster-admin", subject, namespace="team"))
    # A binding's role is fixed once made.
    current = _binding("frank-view", "view", subject, namespace="team")
    with pytest.raises(InvalidObject, match="cannot change roleRef"):
        write(rbac.ROLE_BINDING, _binding("frank-view", "edit", subject, namespace="team"), current)
