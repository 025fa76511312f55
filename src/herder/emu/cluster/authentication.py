"""Who a request to the emulated kube-apiserver comes from, as kube-apiserver authenticates it.

- x509 client certificates issued by the cluster's Kubernetes CA (checked in the TLS handshake, see
  ``kube_api``): the user is the certificate's CN, its groups the O's, plus ``system:authenticated``. A
  request without one is 401.
- Impersonation: ``Impersonate-User`` (a user, or ``system:serviceaccount:NS:NAME``), ``Impersonate-Group``
  (repeated), ``Impersonate-Uid`` and ``Impersonate-Extra-KEY`` act as that user, each of them allowed only if
  the caller may ``impersonate`` it (``users``, ``serviceaccounts``, ``groups`` in the core group;
  ``uids``, ``userextras/KEY`` in ``authentication.k8s.io``); a refusal is Kubernetes' 403. The impersonated
  user is in the groups asked for (a service account without any: its own), and in ``system:authenticated``.
"""

from __future__ import annotations

from collections.abc import Callable

from cryptography import x509
from cryptography.x509.oid import NameOID
from starlette.datastructures import Headers
from starlette.requests import HTTPConnection

from herder.emu.cluster.authorizer import Attributes, forbidden
from herder.emu.cluster.identity import KubeUser, user
from herder.krm.policy import Denied, Unauthenticated
from herder.krm.status import ApiError

IMPERSONATE_USER = "impersonate-user"
IMPERSONATE_GROUP = "impersonate-group"
IMPERSONATE_UID = "impersonate-uid"
IMPERSONATE_EXTRA = "impersonate-extra-"
_CACHED = "herder.kube-user"

Authorize = Callable[[KubeUser, Attributes], tuple[bool, str]]


def certificate_user(connection: HTTPConnection) -> KubeUser:
    """The user of the connection's verified client certificate (read once per connection)."""
    tls = (connection.scope.get("extensions") or {}).get("tls") or {}
    cached = tls.get(_CACHED)
    if isinstance(cached, KubeUser):
        return cached
    chain = tls.get("client_cert_chain") or ()
    if not chain:
        raise Unauthenticated("Unauthorized")
    subject = x509.load_pem_x509_certificate(chain[0].encode()).subject
    common = subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    groups = [str(a.value) for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    found = user(str(common[0].value) if common else "", groups)
    tls[_CACHED] = found
    return found


def impersonated(requestor: KubeUser, headers: Headers, authorize: Authorize) -> KubeUser:
    """The user a request acts as: ``requestor``, or the one its Impersonate-* headers name if it may."""
    name = headers.get(IMPERSONATE_USER, "")
    groups = headers.getlist(IMPERSONATE_GROUP)
    uid = headers.get(IMPERSONATE_UID, "")
    extra: dict[str, list[str]] = {}
    for key, value in headers.items():
        if key.startswith(IMPERSONATE_EXTRA):
            extra.setdefault(key[len(IMPERSONATE_EXTRA) :], []).append(value)
    if not name:
        if groups or uid or extra:
            # kube-apiserver answers this with an internal error; it is the caller's mistake, so 400.
            raise ApiError(
                400,
                "requested impersonation of groups, uid or extra without impersonating a user (Impersonate-User)",
            )
        return requestor

    def check(a: Attributes) -> None:
        allowed, reason = authorize(requestor, a)
        if not allowed:
            raise Denied(forbidden(requestor, a, reason))

    namespace, account = _service_account(name)
    if account:
        check(Attributes("impersonate", namespace=namespace, resource="serviceaccounts", name=account))
        if not groups:
            groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
    else:
        check(Attributes("impersonate", resource="users", name=name))
    for group in headers.getlist(IMPERSONATE_GROUP):
        check(Attributes("impersonate", resource="groups", name=group))
    if uid:
        check(Attributes("impersonate", group="authentication.k8s.io", resource="uids", name=uid))
    for key, values in extra.items():
        for value in values:
            check(
                Attributes(
                    "impersonate",
                    group="authentication.k8s.io",
                    resource="userextras",
                    subresource=key,
                    name=value,
                )
            )
    return user(
        name,
        groups,
        uid=uid,
        extra=tuple((k, tuple(v)) for k, v in sorted(extra.items())),
        impersonator=requestor.name,
    )


def _service_account(name: str) -> tuple[str, str]:
    """The namespace and name of a service account's user name (``system:serviceaccount:NS:NAME``), or empty."""
    prefix, _, rest = name.partition("system:serviceaccount:")
    if prefix or not rest:
        return "", ""
    namespace, _, account = rest.partition(":")
    if not namespace or not account or ":" in account:
        return "", ""
    return namespace, account
