"""Which Talos roles may call which Talos API method (machine, resource and storage API), as machined's authorizer
decides it.

Shared by the emulator (which enforces it) and by anything that proxies the Talos API for users.
"""

from __future__ import annotations

ADMIN = "os:admin"
OPERATOR = "os:operator"
READER = "os:reader"
ETCD_BACKUP = "os:etcd:backup"

NOT_AUTHORIZED = "not authorized"
"""What Talos's authorizer answers, with PermissionDenied, to every caller whose roles do not allow a method."""

SERVICE = "machine.MachineService"
RESOURCE_SERVICE = "cosi.resource.State"
STORAGE_SERVICE = "storage.StorageService"

_READ = frozenset({ADMIN, OPERATOR, READER})

_MACHINE_ROLES: dict[str, frozenset[str]] = {
    # Readers may call it only in maintenance mode; the handler checks that.
    "ApplyConfiguration": frozenset({ADMIN, READER}),
    "Bootstrap": frozenset({ADMIN}),
    "Events": _READ,
    "EtcdForfeitLeadership": frozenset({ADMIN}),
    "EtcdLeaveCluster": frozenset({ADMIN}),
    "EtcdMemberList": _READ | {ETCD_BACKUP},
    "EtcdStatus": _READ | {ETCD_BACKUP},
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
    "Containers": _READ,
    "CPUInfo": _READ,
    "DiskStats": _READ,
    "DiskUsage": _READ,
    "Dmesg": _READ,
    "EtcdAlarmList": _READ | {ETCD_BACKUP},
    "EtcdAlarmDisarm": frozenset({ADMIN, OPERATOR}),
    "EtcdDefragment": frozenset({ADMIN, OPERATOR}),
    "Hostname": _READ,
    "List": _READ,
    "LoadAvg": _READ,
    "Logs": _READ,
    "Memory": _READ,
    "Mounts": _READ,
    "Netstat": _READ,
    "NetworkDeviceStats": _READ,
    "Processes": _READ,
    "Read": frozenset({ADMIN}),
    "Restart": frozenset({ADMIN, OPERATOR}),
    "ServiceRestart": frozenset({ADMIN, OPERATOR}),
    "ServiceStart": frozenset({ADMIN, OPERATOR}),
    "ServiceStop": frozenset({ADMIN, OPERATOR}),
    "Stats": _READ,
    "SystemStat": _READ,
}

METHOD_ROLES: dict[str, frozenset[str]] = {
    **{f"/{SERVICE}/{name}": allowed for name, allowed in _MACHINE_ROLES.items()},
    # Reading resources; sensitive ones need os:admin too (the resource API checks that per type).
    f"/{RESOURCE_SERVICE}/Get": _READ,
    f"/{RESOURCE_SERVICE}/List": _READ,
    f"/{RESOURCE_SERVICE}/Watch": _READ,
    f"/{STORAGE_SERVICE}/Disks": _READ,
}
"""Full gRPC method name (``/machine.MachineService/Version``) → roles allowed; a method not listed needs
os:admin."""

MAINTENANCE_ROLES = frozenset({READER})
"""What a client without a certificate is in maintenance mode (apid's read-only role mode)."""


def allowed(method: str, roles: frozenset[str]) -> bool:
    """Whether a caller holding ``roles`` may call ``method`` (a full name: ``/machine.MachineService/X``)."""
    return bool(METHOD_ROLES.get(method, frozenset({ADMIN})) & roles)
