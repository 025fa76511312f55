"""Who calls the emulated kube-apiserver, as Kubernetes' authentication sees it: a user name, its groups (every
authenticated user is also in ``system:authenticated``), and, for an impersonated user, who impersonates it."""

from __future__ import annotations

from dataclasses import dataclass

from herder.krm.policy import Identity

MASTERS = "system:masters"
"""The group kube-apiserver lets do anything, whatever RBAC says."""
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"


@dataclass(frozen=True)
class KubeUser(Identity):
    """A Kubernetes user: ``name`` is the user name; ``role`` says ``system:masters`` for its members."""

    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """``Impersonate-Extra-*`` values, by key."""

    @property
    def master(self) -> bool:
        return MASTERS in self.groups


def user(
    name: str,
    groups: list[str] | tuple[str, ...],
    *,
    uid: str = "",
    extra: tuple[tuple[str, tuple[str, ...]], ...] = (),
    impersonator: str = "",
) -> KubeUser:
    """The user ``name`` in ``groups`` and, unless it is anonymous or its groups say unauthenticated, in
    ``system:authenticated`` (duplicates dropped, in order)."""
    listed = list(dict.fromkeys(groups))
    if name != ANONYMOUS and AUTHENTICATED not in listed and UNAUTHENTICATED not in listed:
        listed.append(AUTHENTICATED)
    role = MASTERS if MASTERS in listed else ""
    return KubeUser(name, role, impersonator=impersonator, groups=tuple(listed), uid=uid, extra=extra)
