"""The kinds of Kubernetes RBAC (``rbac.authorization.k8s.io/v1``) as the emulated kube-apiserver serves them:
Role, ClusterRole (with its ``aggregationRule``), RoleBinding and ClusterRoleBinding, checked as Kubernetes
checks them (every rule names verbs; resource rules name API groups; namespaced roles cannot grant
non-resource URLs; a binding's role reference and subjects are of the kinds Kubernetes allows).

What they grant is decided by ``authorizer``; the defaults every cluster has are in ``rbac_defaults``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NotRequired

from pydantic import ConfigDict
from typing_extensions import TypedDict

from herder.resources import FieldError, InvalidObject, KindInfo, PrinterColumn, Resource

GROUP = "rbac.authorization.k8s.io"
AGGREGATE_LABEL = GROUP + "/aggregate-to-"
"""The label prefix (``…/aggregate-to-view: "true"``) through which a ClusterRole adds its rules to a default
role's aggregation."""

_STRICT = ConfigDict(extra="forbid")


class PolicyRule(TypedDict):
    __pydantic_config__ = _STRICT  # type: ignore[misc]

    verbs: list[str]
    apiGroups: NotRequired[list[str]]
    resources: NotRequired[list[str]]
    resourceNames: NotRequired[list[str]]
    nonResourceURLs: NotRequired[list[str]]


class LabelSelectorRequirement(TypedDict):
    __pydantic_config__ = _STRICT  # type: ignore[misc]

    key: str
    operator: str
    values: NotRequired[list[str]]


class LabelSelector(TypedDict, total=False):
    __pydantic_config__ = _STRICT  # type: ignore[misc]

    matchLabels: dict[str, str]
    matchExpressions: list[LabelSelectorRequirement]


class AggregationRule(TypedDict, total=False):
    __pydantic_config__ = _STRICT  # type: ignore[misc]

    clusterRoleSelectors: list[LabelSelector]


class RoleRef(TypedDict):
    __pydantic_config__ = _STRICT  # type: ignore[misc]

    apiGroup: str
    kind: str
    name: str


class Subject(TypedDict):
    __pydantic_config__ = _STRICT  # type: ignore[misc]

    kind: str
    name: str
    apiGroup: NotRequired[str]
    namespace: NotRequired[str]


def _rule_errors(rules: list[dict[str, Any]], namespaced: bool) -> list[FieldError]:
    causes = []
    for i, rule in enumerate(rules):
        where = f"rules[{i}]"
        if not rule.get("verbs"):
            causes.append(
                FieldError(f"{where}.verbs", "verbs must contain at least one value", "FieldValueRequired")
            )
        urls, resources = rule.get("nonResourceURLs"), rule.get("resources")
        if urls:
            if namespaced:
                causes.append(
                    FieldError(
                        f"{where}.nonResourceURLs", "namespaced rules cannot apply to non-resource URLs"
                    )
                )
            if resources or rule.get("apiGroups"):
                causes.append(
                    FieldError(
                        f"{where}.nonResourceURLs",
                        "rules cannot apply to both regular resources and non-resource URLs",
                    )
                )
        elif not rule.get("apiGroups"):
            causes.append(
                FieldError(
                    f"{where}.apiGroups",
                    "resource rules must supply at least one api group",
                    "FieldValueRequired",
                )
            )
        elif not resources:
            causes.append(
                FieldError(
                    f"{where}.resources",
                    "resource rules must supply at least one resource",
                    "FieldValueRequired",
                )
            )
    return causes


def _checked_role(kind: str, namespaced: bool) -> Callable[[Resource], Resource]:
    def check(obj: Resource) -> Resource:
        extra = obj.model_extra or {}
        causes = _rule_errors(extra.get("rules") or [], namespaced)
        if causes:
            raise InvalidObject(kind, obj.name, causes)
        return obj

    return check


_BINDING_ROLES = {"RoleBinding": ("Role", "ClusterRole"), "ClusterRoleBinding": ("ClusterRole",)}


def _checked_binding(kind: str) -> Callable[[Resource], Resource]:
    def check(obj: Resource) -> Resource:
        extra = obj.model_extra or {}
        causes = []
        ref = extra.get("roleRef")
        if ref is None:
            causes.append(FieldError("roleRef", "is required", "FieldValueRequired"))
        else:
            if ref["apiGroup"] != GROUP:
                causes.append(
                    FieldError("roleRef.apiGroup", f'supported values: "{GROUP}"', "FieldValueNotSupported")
                )
            allowed = _BINDING_ROLES[kind]
            if ref["kind"] not in allowed:
                supported = ", ".join(f'"{k}"' for k in allowed)
                causes.append(
                    FieldError("roleRef.kind", f"supported values: {supported}", "FieldValueNotSupported")
                )
            if not ref["name"]:
                causes.append(FieldError("roleRef.name", "Required value", "FieldValueRequired"))
        for i, subject in enumerate(extra.get("subjects") or []):
            where = f"subjects[{i}]"
            if not subject["name"]:
                causes.append(FieldError(f"{where}.name", "Required value", "FieldValueRequired"))
            if subject["kind"] == "ServiceAccount":
                if subject.get("apiGroup"):
                    causes.append(
                        FieldError(f"{where}.apiGroup", 'supported values: ""', "FieldValueNotSupported")
                    )
                if kind == "ClusterRoleBinding" and not subject.get("namespace"):
                    causes.append(FieldError(f"{where}.namespace", "Required value", "FieldValueRequired"))
            elif subject["kind"] in ("User", "Group"):
                if subject.get("apiGroup", GROUP) != GROUP:
                    causes.append(
                        FieldError(
                            f"{where}.apiGroup", f'supported values: "{GROUP}"', "FieldValueNotSupported"
                        )
                    )
                subject.setdefault("apiGroup", GROUP)
            else:
                causes.append(
                    FieldError(
                        f"{where}.kind",
                        'supported values: "ServiceAccount", "User", "Group"',
                        "FieldValueNotSupported",
                    )
                )
        if causes:
            raise InvalidObject(kind, obj.name, causes)
        return obj

    return check


def _role_of(obj: dict[str, Any]) -> str:
    ref = obj.get("roleRef") or {}
    return f"{ref.get('kind', '')}/{ref.get('name', '')}"


def _subjects(kind: str) -> Any:
    def names(obj: dict[str, Any]) -> str:
        subjects = obj.get("subjects") or ()
        if kind == "ServiceAccount":
            shown = [f"{s.get('namespace', '')}/{s['name']}" for s in subjects if s.get("kind") == kind]
        else:
            shown = [s["name"] for s in subjects if s.get("kind") == kind]
        return ", ".join(shown)

    return names


def _name_problem(name: str) -> str:
    """What is wrong with an RBAC object's name: Kubernetes asks only that it be a path segment."""
    if name in (".", ".."):
        return f"may not be '{name}'"
    for bad in ("/", "%"):
        if bad in name:
            return f"may not contain '{bad}'"
    return ""


@dataclass(frozen=True)
class RbacKind(KindInfo):
    """An RBAC kind: its objects' names are path segments (``system:basic-user``), not DNS subdomains as other
    kinds' are, and its own checks (``check``) run on every write."""

    check: Callable[[Resource], Resource] | None = None

    def validate(self, obj: Resource, *, override: Mapping[str, Any] | None = None) -> Resource:
        name = obj.metadata.name
        if not name:
            valid = super().validate(obj, override=override)
        else:
            problem = _name_problem(name)
            if problem:
                raise InvalidObject(self.kind, name, [FieldError("metadata.name", f"{name!r}: {problem}")])
            # The generic checks with a name they accept, then the object's own name again.
            stand_in = obj.model_copy(update={"metadata": obj.metadata.model_copy(update={"name": "rbac"})})
            valid = super().validate(stand_in, override=override)
            valid.metadata.name = name
        return self.check(valid) if self.check is not None else valid


_BINDING_COLUMNS = (
    PrinterColumn("Role", ".roleRef", compute=_role_of),
    PrinterColumn("Age", ".metadata.creationTimestamp", type="date"),
    PrinterColumn("Users", ".subjects", priority=1, compute=_subjects("User")),
    PrinterColumn("Groups", ".subjects", priority=1, compute=_subjects("Group")),
    PrinterColumn("ServiceAccounts", ".subjects", priority=1, compute=_subjects("ServiceAccount")),
)

ROLE = RbacKind(
    group=GROUP,
    version="v1",
    kind="Role",
    plural="roles",
    extra_fields={"rules": list[PolicyRule] | None},
    check=_checked_role("Role", True),
    description="Rules granting access to resources in one namespace.",
)
CLUSTER_ROLE = RbacKind(
    group=GROUP,
    version="v1",
    kind="ClusterRole",
    plural="clusterroles",
    namespaced=False,
    extra_fields={"rules": list[PolicyRule] | None, "aggregationRule": AggregationRule},
    check=_checked_role("ClusterRole", False),
    description="Rules granting access to resources in every namespace, or to non-resource URLs.",
)
ROLE_BINDING = RbacKind(
    group=GROUP,
    version="v1",
    kind="RoleBinding",
    plural="rolebindings",
    extra_fields={"roleRef": RoleRef, "subjects": list[Subject] | None},
    printer_columns=_BINDING_COLUMNS,
    check=_checked_binding("RoleBinding"),
    description="Grants a Role or a ClusterRole to subjects in one namespace.",
)
CLUSTER_ROLE_BINDING = RbacKind(
    group=GROUP,
    version="v1",
    kind="ClusterRoleBinding",
    plural="clusterrolebindings",
    namespaced=False,
    extra_fields={"roleRef": RoleRef, "subjects": list[Subject] | None},
    printer_columns=_BINDING_COLUMNS,
    check=_checked_binding("ClusterRoleBinding"),
    description="Grants a ClusterRole to subjects in every namespace.",
)
KINDS = (ROLE, CLUSTER_ROLE, ROLE_BINDING, CLUSTER_ROLE_BINDING)
