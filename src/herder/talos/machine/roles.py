"""Which Talos roles may call which machine API method, as machined's authorizer decides it.

Shared by the emulator (which enforces it) and by anything that proxies the Talos API for users.
"""

from __future__ import annotations

ADMIN = "os:admin"
OPERATOR = "os:operator"
READER = "os:reader"
ETCD_BACKUP = "os:etcd:backup"

SERVICE = "machine.MachineService"

_READ = frozenset({ADMIN, OPERATOR, READER})

METHOD_ROLES: dict[str, frozenset[str]] = {
    # Readers may call it only in maintenance mode; the handler checks that.
    "ApplyConfiguration": frozenset({ADMIN, READER}),
    "Bootstrap": frozenset({ADMIN}),
    "Events": _READ,
    "EtcdForfeitLeadership": frozenset({ADMIN}),
    "EtcdLeaveCluster": frozenset({ADMIN}),
    "EtcdMemberList": _READ | {ETCD_BACKUP},
    "EtcdRecover": frozenset({ADMIN}),
    "EtcdRemoveMemberByID": frozenset({ADMIN}),
    "EtcdSnapshot": frozenset({ADMIN, OPERATOR, ETCD_BACKUP}),
    "Kubeconfig": frozenset({ADMIN}),
    "Reboot": frozenset({ADMIN, OPERATOR}),
    "Reset": frozenset({ADMIN}),
    "ServiceList": _READ,
    "Shutdown": frozenset({ADMIN, OPERATOR}),
    "Upgrade": frozenset({ADMIN}),
    "Version": _READ,
}
"""Method name (within ``machine.MachineService``) → roles allowed; a method not listed needs os:admin."""

MAINTENANCE_ROLES = frozenset({READER})
"""What a client without a certificate is in maintenance mode (apid's read-only role mode)."""


def allowed(method: str, roles: frozenset[str]) -> bool:
    """Whether a caller holding ``roles`` may call ``method`` (a bare name or ``/machine.MachineService/X``)."""
    name = method.rsplit("/", 1)[-1]
    return bool(METHOD_ROLES.get(name, frozenset({ADMIN})) & roles)
