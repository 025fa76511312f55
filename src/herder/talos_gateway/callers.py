"""Who calls the gateway, as herder sees them now: the identity a talosconfig's certificate names, if it
still exists (the same account, not one made again under its name), with the Talos role it may use, and
the cluster the talosconfig is for, if the caller may still see it.

A certificate never grants more than its account holds now: its Talos role is cut down to the one of the
account's current role on the certificate's cluster (its own, raised by the AccessPolicy's rules), and
an account deleted (or Support, once the server holds no Support token)
leaves its certificates worthless at once, however long they were issued for.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from herder.api import roles as herder_roles
from herder.api import tokens
from herder.api.cluster_access import AccessPolicies, ClusterAccess, effective_role
from herder.api.support import SUPPORT_IDENTITY
from herder.krm.policy import Identity
from herder.resources import Resource
from herder.resources.access import HIDDEN_LABEL, TALOS_ROLES
from herder.resources.clusters import CLUSTER
from herder.state.errors import NotFound
from herder.state.store import Store
from herder.talos.machine import roles
from herder.talos_gateway.authority import ClientCertificate, ClusterRef

_STRENGTH = {roles.READER: 1, roles.OPERATOR: 2, roles.ADMIN: 3}


class Refused(Exception):
    """A call (or its leg to one node) the gateway answers itself, with a gRPC status as Talos would."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Account:
    identity: Identity
    uid: str


@dataclass(frozen=True)
class Caller:
    identity: Identity
    talos_role: str
    cluster: Resource | None
    """The talosconfig's cluster; None when it is gone or the caller may not see it (its nodes are then
    found nowhere)."""
    bound: ClusterRef
    """The cluster the certificate was issued for."""

    @property
    def sees_hidden(self) -> bool:
        return herder_roles.sees_hidden(self.identity.role)

    def may_call(self, method: str) -> bool:
        """Whether Talos's table lets the caller's Talos role call ``method`` (its full gRPC name)."""
        return roles.allowed(method, frozenset({self.talos_role}))


async def account(store: Store, name: str, *, support: bool) -> Account | None:
    """The account called ``name`` as audit events name it (``serviceaccount:ci``), as it is now."""
    if name == SUPPORT_IDENTITY:
        return Account(Identity(SUPPORT_IDENTITY, "Support"), "") if support else None
    found = tokens.subject_of(name)
    if found is None:
        return None
    kind, bare = found
    _, model = tokens.SUBJECT_KINDS[kind.kind]
    try:
        subject = await store.get(kind, bare)
    except NotFound:
        return None
    if tokens.disabled(subject):
        return None
    spec = kind.spec_of(subject, model)
    return Account(
        Identity(tokens.identity_name(kind.kind, subject.name), spec.role, labels=subject.metadata.labels),
        subject.metadata.uid or "",
    )


class Callers:
    def __init__(self, store: Store, *, support: bool, rules: AccessPolicies | None = None) -> None:
        self._store = store
        self._support = support
        self._rules = rules

    async def of(self, presented: ClientCertificate) -> Caller:
        """The caller, or ``Refused`` when the certificate's account is gone or holds no Talos role."""
        held = await account(self._store, presented.identity, support=self._support)
        if held is None or held.uid != presented.identity_uid:
            raise Refused(
                grpc.StatusCode.UNAUTHENTICATED,
                f"{presented.identity}, whom this certificate names, no longer exists: "
                "ask herder for a new talosconfig",
            )
        who = held.identity
        ref = presented.cluster
        policy = self._rules.current if self._rules is not None else ClusterAccess()
        role = TALOS_ROLES.get(effective_role(who.role, policy.grant(who.name, who.labels, ref.name)))
        granted = [r for r in presented.talos_roles if r in _STRENGTH]
        if role is None or not granted:
            raise Refused(grpc.StatusCode.PERMISSION_DENIED, roles.NOT_AUTHORIZED)
        # The weaker of what the certificate says and what the account holds now.
        talos_role = min(role, max(granted, key=_STRENGTH.__getitem__), key=_STRENGTH.__getitem__)
        cluster: Resource | None
        try:
            cluster = await self._store.get(CLUSTER, ref.name, ref.namespace)
        except NotFound:
            cluster = None
        if cluster is not None and (
            cluster.metadata.uid != ref.uid
            or (HIDDEN_LABEL in cluster.metadata.labels and not herder_roles.sees_hidden(held.identity.role))
        ):
            cluster = None
        return Caller(held.identity, talos_role, cluster, ref)
