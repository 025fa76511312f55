"""The RBAC objects kube-apiserver puts in every cluster at its start (its bootstrap policy), as far as users and
their tools meet them: the user-facing ClusterRoles ``cluster-admin``, and ``admin``, ``edit`` and ``view``
aggregated, as in Kubernetes, from the ``system:aggregate-to-*`` roles (and from any ClusterRole labelled
``rbac.authorization.k8s.io/aggregate-to-*: "true"``); what every authenticated user may do
(``system:basic-user``: ask who they are and what they may do; ``system:discovery``); what anyone may read
(``system:public-info-viewer``); and ``cluster-admin`` bound to group ``system:masters``.
"""

from __future__ import annotations

from typing import Any

from herder.emu.cluster.identity import AUTHENTICATED, MASTERS, UNAUTHENTICATED
from herder.emu.cluster.rbac import AGGREGATE_LABEL, GROUP

_READ = ("get", "list", "watch")
_WRITE = ("create", "delete", "deletecollection", "patch", "update")
_ALL = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")

Rule = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]
"""(apiGroups, resources, verbs)"""

_VIEW: tuple[Rule, ...] = (
    (
        ("",),
        (
            "configmaps",
            "endpoints",
            "persistentvolumeclaims",
            "persistentvolumeclaims/status",
            "pods",
            "replicationcontrollers",
            "replicationcontrollers/scale",
            "serviceaccounts",
            "services",
            "services/status",
        ),
        _READ,
    ),
    (
        ("",),
        (
            "bindings",
            "events",
            "limitranges",
            "namespaces/status",
            "pods/log",
            "pods/status",
            "replicationcontrollers/status",
            "resourcequotas",
            "resourcequotas/status",
        ),
        _READ,
    ),
    (("",), ("namespaces",), _READ),
    (("discovery.k8s.io",), ("endpointslices",), _READ),
    (
        ("apps",),
        (
            "controllerrevisions",
            "daemonsets",
            "daemonsets/status",
            "deployments",
            "deployments/scale",
            "deployments/status",
            "replicasets",
            "replicasets/scale",
            "replicasets/status",
            "statefulsets",
            "statefulsets/scale",
            "statefulsets/status",
        ),
        _READ,
    ),
    (("autoscaling",), ("horizontalpodautoscalers", "horizontalpodautoscalers/status"), _READ),
    (("batch",), ("cronjobs", "cronjobs/status", "jobs", "jobs/status"), _READ),
    (("policy",), ("poddisruptionbudgets", "poddisruptionbudgets/status"), _READ),
    (("networking.k8s.io",), ("ingresses", "ingresses/status", "networkpolicies"), _READ),
)
_EDIT: tuple[Rule, ...] = (
    (
        ("",),
        ("pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets", "services/proxy"),
        _READ,
    ),
    (("",), ("serviceaccounts",), ("impersonate",)),
    (("",), ("pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"), _WRITE),
    (("",), ("pods/eviction",), ("create",)),
    (
        ("",),
        (
            "configmaps",
            "events",
            "persistentvolumeclaims",
            "replicationcontrollers",
            "replicationcontrollers/scale",
            "secrets",
            "serviceaccounts",
            "services",
            "services/proxy",
        ),
        _WRITE,
    ),
    (("",), ("serviceaccounts/token",), ("create",)),
    (
        ("apps",),
        (
            "daemonsets",
            "deployments",
            "deployments/rollback",
            "deployments/scale",
            "replicasets",
            "replicasets/scale",
            "statefulsets",
            "statefulsets/scale",
        ),
        _WRITE,
    ),
    (("autoscaling",), ("horizontalpodautoscalers",), _WRITE),
    (("batch",), ("cronjobs", "jobs"), _WRITE),
    (("policy",), ("poddisruptionbudgets",), _WRITE),
    (("networking.k8s.io",), ("ingresses", "networkpolicies"), _WRITE),
    (("coordination.k8s.io",), ("leases",), _ALL),
)
_ADMIN: tuple[Rule, ...] = (
    (("authorization.k8s.io",), ("localsubjectaccessreviews",), ("create",)),
    ((GROUP,), ("rolebindings", "roles"), _ALL),
)
_BASIC_USER: tuple[Rule, ...] = (
    (("authorization.k8s.io",), ("selfsubjectaccessreviews", "selfsubjectrulesreviews"), ("create",)),
    (("authentication.k8s.io",), ("selfsubjectreviews",), ("create",)),
)
_DISCOVERY_URLS = (
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/healthz",
    "/livez",
    "/openapi",
    "/openapi/*",
    "/readyz",
    "/version",
    "/version/",
)
_PUBLIC_URLS = ("/healthz", "/livez", "/readyz", "/version", "/version/")


def _metadata(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "labels": {"kubernetes.io/bootstrapping": "rbac-defaults", **(labels or {})},
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    }


def _rules(rules: tuple[Rule, ...]) -> list[dict[str, Any]]:
    return [{"apiGroups": list(g), "resources": list(r), "verbs": list(v)} for g, r, v in rules]


def _role(name: str, rules: list[dict[str, Any]], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": _metadata(name, labels),
        "rules": rules,
    }


def _aggregated(name: str, rules: tuple[Rule, ...], labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A role whose rules are those of the ClusterRoles labelled to aggregate into it (``aggregation`` keeps
    them so); it starts with those of the defaults, in the order the aggregation puts them."""
    selector = {"matchLabels": {AGGREGATE_LABEL + name: "true"}}
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": _metadata(name, labels),
        "aggregationRule": {"clusterRoleSelectors": [selector]},
        "rules": _rules(rules),
    }


def _binding(name: str, *groups: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": _metadata(name),
        "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": GROUP, "kind": "Group", "name": g} for g in groups],
    }


def _to(role: str) -> dict[str, str]:
    return {AGGREGATE_LABEL + role: "true"}


CLUSTER_ROLES: tuple[dict[str, Any], ...] = (
    _role(
        "cluster-admin",
        [
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            {"nonResourceURLs": ["*"], "verbs": ["*"]},
        ],
    ),
    _aggregated("admin", _EDIT + _VIEW + _ADMIN),
    _aggregated("edit", _EDIT + _VIEW, _to("admin")),
    _aggregated("view", _VIEW, _to("edit")),
    _role("system:aggregate-to-admin", _rules(_ADMIN), _to("admin")),
    _role("system:aggregate-to-edit", _rules(_EDIT), _to("edit")),
    _role("system:aggregate-to-view", _rules(_VIEW), _to("view")),
    _role("system:basic-user", _rules(_BASIC_USER)),
    _role("system:discovery", [{"nonResourceURLs": list(_DISCOVERY_URLS), "verbs": ["get"]}]),
    _role("system:public-info-viewer", [{"nonResourceURLs": list(_PUBLIC_URLS), "verbs": ["get"]}]),
)
"""The default ClusterRoles; the aggregated ones get their rules from ``aggregation``."""

CLUSTER_ROLE_BINDINGS: tuple[dict[str, Any], ...] = (
    _binding("cluster-admin", MASTERS),
    _binding("system:basic-user", AUTHENTICATED),
    _binding("system:discovery", AUTHENTICATED),
    _binding("system:public-info-viewer", AUTHENTICATED, UNAUTHENTICATED),
)
