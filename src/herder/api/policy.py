"""herder's access policy on ``krm``: bearer tokens (with the rate limit of failed ones), the roles'
policy table with each identity's role per cluster (its own, raised by the AccessPolicy's rules), hidden
and read-only objects, reserved names, herder-owned labels, and the audit trail.

An object belongs to a cluster when it is the Cluster or is labelled ``herder.dev/cluster``; the
identity's role on that cluster governs it, in every verb and in what lists and watches show. Objects of
no cluster are governed by the identity's own role, so a ``None`` identity sees nothing but its clusters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any

from starlette.requests import Request

from herder.api import roles, tokens
from herder.api.audit import AuditLog
from herder.api.auth_limit import AuthFailureLimit
from herder.api.cluster_access import AccessPolicies, ClusterAccess, effective_role, higher, kubernetes_groups
from herder.api.people import People
from herder.api.sessions import Sessions
from herder.api.support import Support
from herder.krm.policy import Access, Denied, Identity, Unauthenticated
from herder.krm.status import ApiError, invalid
from herder.resources import FieldError, KindInfo, Resource
from herder.resources.access import HIDDEN_LABEL, INFRA_PROVIDER_LABEL, READ_ONLY_ANNOTATION, RESERVED_PREFIX
from herder.resources.machines import CLUSTER_LABEL
from herder.state.store import Store

# Hidden objects Support reached in the current request (a request runs in one task, so one context):
# its audit event, which admins below Support read, must not name them.
_HIDDEN_REACHED: ContextVar[frozenset[str]] = ContextVar("herder_hidden_reached", default=frozenset())


def _note_hidden(who: Identity, name: str, labels: Mapping[str, str]) -> None:
    if roles.sees_hidden(who.role) and HIDDEN_LABEL in labels:
        _HIDDEN_REACHED.set(_HIDDEN_REACHED.get() | {name})


class HerderPolicy:
    """The ``krm.AccessPolicy`` of herder's API server."""

    def __init__(
        self,
        store: Store,
        audit: AuditLog,
        auth_limit: AuthFailureLimit | None = None,
        support: Support | None = None,
        access: AccessPolicies | None = None,
        people: People | None = None,
        sessions: Sessions | None = None,
    ) -> None:
        self._store = store
        self._audit = audit
        self._auth_limit = auth_limit or AuthFailureLimit()
        self._support = support or Support(store, None)
        self._access = access
        # People signing in through the identity provider (None: no single sign-on configured).
        self.people = people
        # The web UI's sessions, in the store.
        self.sessions = sessions or Sessions(store)

    @property
    def rules(self) -> ClusterAccess:
        """The AccessPolicy in force."""
        return self._access.current if self._access is not None else _NO_RULES

    def cluster_role(self, who: Identity, cluster: str) -> str:
        """``who``'s role on the cluster named ``cluster``."""
        rules = self.rules
        if rules.empty:
            return who.role
        return effective_role(who.role, rules.grant(who.name, who.labels, cluster))

    def kubernetes_groups(self, who: Identity, cluster: str) -> tuple[str, ...]:
        """The Kubernetes groups ``who`` acts in on the cluster named ``cluster`` (none: no access)."""
        return kubernetes_groups(who.role, self.rules.grant(who.name, who.labels, cluster))

    def role_on(self, who: Identity, kind: KindInfo, name: str, labels: Mapping[str, str]) -> str:
        """``who``'s role on one object: on its cluster, for an object of a cluster's kind that belongs
        to one; else its own."""
        if kind.kind not in roles.CLUSTER_KINDS:
            return who.role
        cluster = name if kind.kind == "Cluster" else labels.get(CLUSTER_LABEL)
        return self.cluster_role(who, cluster) if cluster else who.role

    def _best_role(self, who: Identity, kind: KindInfo) -> str:
        """The highest role ``who`` holds on some object of ``kind``: on some cluster, for a cluster's kind."""
        rules = self.rules
        if rules.empty or who.role not in _LADDER or kind.kind not in roles.CLUSTER_KINDS:
            return who.role
        return higher(who.role, rules.best(who.name, who.labels))

    async def authenticate(self, request: Request) -> Identity:
        try:
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise Unauthenticated("a bearer token is required")
            who = self._support.identity(token.strip()) or await tokens.authenticate(
                self._store, token.strip()
            )
        except Unauthenticated:
            self.failed(request)
            raise
        return await self._support.impersonated(who, request)

    def failed(self, request: Request) -> None:
        """Count a failed authentication (a bad token, a refused sign-in) from the request's source;
        ``ApiError`` 429 once the source is over its limit."""
        source = _source(request)
        wait = self._auth_limit.failed(source)
        if wait is not None:
            raise ApiError(
                429,
                f"too many failed authentications from {source}: try again in {wait} s",
                details={"retryAfterSeconds": wait},
                headers={"Retry-After": str(wait)},
            ) from None

    def authorize(self, who: Identity, access: Access, obj: Resource | None = None) -> None:
        if obj is None:
            # Before any object is read: whether the caller may do this to some object of the kind, on
            # some cluster, so that a refusal says nothing of which objects exist.
            if not roles.allows(self._best_role(who, access.kind), access):
                raise Denied(_refusal(who, access))
            return
        role = self.role_on(who, access.kind, obj.name, obj.metadata.labels)
        if not roles.allows(role, access):
            raise Denied(_refusal(who, access, role))
        _note_hidden(who, obj.name, obj.metadata.labels)
        scope = roles.rule_for(access.kind).infra
        if who.role == "InfraProvider" and scope is not None:
            provider = who.scope.get(scope.label)
            if obj.metadata.labels.get(scope.label) != provider:
                raise Denied(
                    f"{who.name}: an infra provider may only {access.verb} {access.kind.plural} "
                    f'labelled "{scope.label}={provider}"'
                )
        if access.verb in roles.READ_VERBS or access.subresource or roles.sees_hidden(who.role):
            return
        if READ_ONLY_ANNOTATION in obj.metadata.annotations:
            raise Denied(
                f'{access.kind.kind} "{obj.name}" is read-only, managed by the platform: '
                "nobody may change, delete or act on it"
            )

    def admit(self, who: Identity, access: Access, current: Resource | None, new: Resource) -> None:
        """Refuse a create below Support of a reserved name, hiding an object whose name is not
        reserved, and a write that adds, changes or removes a ``herder.dev/`` label or annotation
        users may not set.
        """
        if who.role == "InfraProvider":
            _infra_change(access, current, new)
        # A status write keeps the object's metadata whatever the body says: nothing to refuse there.
        if access.subresource:
            return
        if roles.sees_hidden(who.role):
            _check_hidden_name(access, current, new)
            return
        # A provider hides what it makes for hidden requests (their config patches) under reserved names.
        provider_hides = _hidden_provider(who) and HIDDEN_LABEL in new.metadata.labels
        if provider_hides:
            _check_hidden_name(access, current, new)
        if current is None and not provider_hides:
            _refuse_reserved(who, access, new)
        rule = roles.rule_for(access.kind)
        role = self.role_on(who, access.kind, new.name, new.metadata.labels)
        annotations = roles.USER_SETTABLE_ANNOTATIONS | {
            key for key, minimum in roles.ROLE_SETTABLE_ANNOTATIONS.items() if roles.at_least(role, minimum)
        }
        labels = roles.USER_SETTABLE_LABELS - rule.owned_labels
        if who.role == "InfraProvider" and rule.infra is not None and rule.infra.labels is not None:
            labels = rule.infra.labels
        for what, allowed, before, after in (
            (
                "label",
                labels,
                current.metadata.labels if current else {},
                new.metadata.labels,
            ),
            (
                "annotation",
                annotations,
                current.metadata.annotations if current else {},
                new.metadata.annotations,
            ),
        ):
            for key in sorted(before.keys() | after.keys()):
                if (
                    key.startswith(roles.HERDER_PREFIX)
                    and key not in allowed
                    and before.get(key) != after.get(key)
                ):
                    raise Denied(
                        f"{what} {key} is set by herder: {who.name} may not set, change or remove it"
                    )

    def visible(self, who: Identity, kind: KindInfo, name: str, labels: Mapping[str, str]) -> bool:
        _note_hidden(who, name, labels)
        hidden = HIDDEN_LABEL in labels and not roles.sees_hidden(who.role)
        if who.role != "InfraProvider":
            if hidden:
                return False
            # A rule only raises a role: below Reader, the object's cluster must grant the caller more.
            return roles.at_least(who.role, "Reader") or roles.at_least(
                self.role_on(who, kind, name, labels), "Reader"
            )
        scope = roles.rule_for(kind).infra
        if scope is None:
            # Kinds outside the provider's scope are refused whole (403) by ``authorize``, not hidden.
            return not hidden
        # A hidden provider (a managed control plane's) sees its own hidden objects: it must read itself
        # and serve its hidden requests. Other providers see nothing hidden.
        mine = labels.get(scope.label) == who.scope.get(scope.label)
        return mine and (not hidden or _hidden_provider(who))

    def redaction(self, who: Identity, kind: KindInfo) -> Callable[[Resource], Resource] | None:
        """Objects of ``kind`` without its confidential fields, unless ``who`` may read them, and without
        its references to hidden objects, unless ``who`` sees those."""
        rule = roles.rule_for(kind)
        fields = () if roles.reads_confidential(who.role) else rule.confidential
        references = () if roles.sees_hidden(who.role) else rule.references
        if not fields and not references:
            return None

        def redact(obj: Resource) -> Resource:
            hidden = [path for path in references if roles.reserved(_reference(obj, path))]
            if not fields and not hidden:
                return obj
            data = obj.to_dict()
            data["metadata"].pop("managedFields", None)  # their keys would name what was left out
            for path in (*fields, *hidden):
                _drop(data, path)
            return Resource.from_dict(data)

        return redact

    def actor(self, who: Identity) -> str:
        return tokens.actor_of(who)

    async def record(
        self,
        who: Identity | None,
        access: Access | None,
        request: Request,
        status: int,
        message: str = "",
        *,
        changed: bool = True,
    ) -> None:
        if who is None and status == 429:
            return  # a rate-limited failure: a flood of them must not fill audit.log
        await self._audit.record(
            who,
            access,
            method=request.method,
            source=_source(request),
            user_agent=request.headers.get("user-agent", ""),
            code=status,
            message=message,
            conceal=_concealed(who, access),
            changed=changed,
        )


def _concealed(who: Identity | None, access: Access | None) -> frozenset[str]:
    """What the audit events admins read must not name of Support's requests: the hidden objects it
    reached, and any reserved name or namespace (which may be a hidden one: even a create that
    failed with AlreadyExists would tell). Others' requests were answered as if nothing hidden
    existed, so their events tell nothing either."""
    if who is None or not roles.sees_hidden(who.role) or access is None:
        return frozenset()
    reached = _HIDDEN_REACHED.get()
    return frozenset(
        name for name in (access.name, access.namespace) if name and (roles.reserved(name) or name in reached)
    )


def _hidden_provider(who: Identity) -> bool:
    """Whether ``who`` is a hidden infra provider: only those have reserved ids (``herder-…``)."""
    return who.role == "InfraProvider" and roles.reserved(who.scope.get(INFRA_PROVIDER_LABEL))


def _reference(obj: Resource, path: str) -> str | None:
    """The name a reference field of an object holds (``spec.machineRequestSet``), if any."""
    part, _, rest = path.partition(".")
    node: Any = obj.spec if part == "spec" else obj.status if part == "status" else None
    for key in rest.split(".") if rest else ():
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, str) else None


def _drop(data: dict[str, Any], path: str) -> None:
    """Remove the field at a dotted path of an object's dict, if it is there."""
    *parents, last = path.split(".")
    node: Any = data
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(last, None)


def _infra_change(access: Access, current: Resource | None, new: Resource) -> None:
    """Refuse a provider's change outside what its scope of the kind lets it change."""
    scope = roles.rule_for(access.kind).infra
    if scope is None or current is None:
        return
    if access.subresource == "status":
        if scope.status_fields is None:
            return
        before, after = current.status or {}, new.status or {}
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        outside = [k for k in changed if k not in scope.status_fields]
        if outside:
            raise Denied(
                f"an infra provider may change only {', '.join(sorted(scope.status_fields))} of the "
                f"status of {access.kind.plural}, not {', '.join(outside)}"
            )
        return
    if scope.fields is None:
        return
    unchanged = ("resourceVersion", "generation", "managedFields")
    views = []
    for obj in (current, new):
        data = obj.to_dict()
        data.pop("status", None)
        for key in unchanged:
            data["metadata"].pop(key, None)
        for path in scope.fields:
            _drop(data, path)
        views.append(data)
    if views[0] != views[1]:
        raise Denied(
            f"an infra provider may change only {', '.join(sorted(scope.fields))} of {access.kind.plural}"
        )


def _source(request: Request) -> str:
    return request.client.host if request.client else ""


def _refuse_reserved(who: Identity, access: Access, new: Resource) -> None:
    """Refuse, whatever exists, a create in herder's reserved names: where hidden objects live."""
    meta = new.metadata
    for what, name in (("name", meta.name or meta.generate_name), ("namespace", meta.namespace)):
        if roles.reserved(name):
            raise Denied(
                f'{access.kind.plural} "{meta.name or meta.generate_name}" is forbidden: {who.name} '
                f"(role {who.role}) cannot create an object whose {what} begins with "
                f'"{RESERVED_PREFIX}": those are reserved to herder'
            )


def _check_hidden_name(access: Access, current: Resource | None, new: Resource) -> None:
    """Only objects of reserved names may become hidden: no create below Support can meet them.
    Identities may not: their names are in the audit events of every request they make."""
    hidden = HIDDEN_LABEL in new.metadata.labels
    was_hidden = current is not None and HIDDEN_LABEL in current.metadata.labels
    name = new.metadata.name or new.metadata.generate_name
    if not hidden or was_hidden:
        return
    why = ""
    if access.kind.kind in tokens.SUBJECT_KINDS:
        why = f"a {access.kind.kind} may not be hidden: audit events name it as the one who asked"
    elif not roles.reserved(name):
        why = f'only an object whose name begins with "{RESERVED_PREFIX}" may be hidden'
    if why:
        raise invalid(access.kind, name or "", [FieldError("metadata.labels", f"{HIDDEN_LABEL}: {why}")])


_NO_RULES = ClusterAccess()
_LADDER = frozenset({"None", "Reader", "Operator", "Admin"})


def _refusal(who: Identity, access: Access, role: str | None = None) -> str:
    """A Kubernetes-shaped refusal, naming the object only as the caller named it (and the role the
    caller holds where it asked, which may be one a rule gave it on the object's cluster)."""
    resource = access.kind.plural + (f"/{access.subresource}" if access.subresource else "")
    what = f'resource "{resource}" in API group "{access.kind.group}"'
    target = f' "{access.name}"' if access.name else ""
    where = f' in the namespace "{access.namespace}"' if access.namespace else ""
    if access.namespace is None and access.kind.namespaced and access.verb in roles.READ_VERBS:
        where = " at the cluster scope"
    held = role or who.role
    return f"{access.kind.plural}{target} is forbidden: {who.name} (role {held}) cannot {access.verb} {what}{where}"
