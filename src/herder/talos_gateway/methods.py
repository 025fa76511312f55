"""The methods the gateway knows: the Talos machine API (``machine.MachineService``), the resource API
(``cosi.resource.State``) and the storage API's ``Disks`` (``storage.StorageService``) that herder speaks,
each with the shape of its messages, read from the protos, and which of them the gateway lets through.

The gateway relays raw messages and never decodes them; what it needs of a method is whether its requests
and its replies stream, and whether apid fans it out to several nodes (``nodes`` metadata): the machine
and storage APIs yes, the resource API no.

What goes through, as Omni lets calls through its Talos API proxy: every call that only reads, and of the
calls that change a machine only those that leave its configuration as herder made it (reboot, shutdown,
restart a container, start, stop or restart a service, etcd's leadership, alarms and defragmentation).
Everything else (applying a config, upgrading, resetting, bootstrapping, leaving etcd, taking its
snapshot, the admin kubeconfig…) is herder's to do and is refused to every caller, naming the call; within
what goes through, Talos's role table still says who may call what.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from herder.talos.api.cosi import state_pb2
from herder.talos.api.machine import machine_pb2
from herder.talos.api.storage import storage_pb2
from herder.talos.machine import roles

# The services apid proxies one-to-many; of Talos's others (cluster, inspect, time) herder speaks none.
_ONE_TO_MANY = frozenset({roles.SERVICE, roles.STORAGE_SERVICE})


@dataclass(frozen=True)
class Method:
    service: str
    """``machine.MachineService``."""
    path: str
    """The full gRPC name: ``/machine.MachineService/Version``."""
    name: str
    """``Version``."""
    client_streaming: bool
    server_streaming: bool
    one_to_many: bool


def _methods(module: Any, service: str) -> list[Method]:
    descriptor = module.DESCRIPTOR.services_by_name[service]
    return [
        Method(
            service=descriptor.full_name,
            path=f"/{descriptor.full_name}/{m.name}",
            name=m.name,
            client_streaming=m.client_streaming,
            server_streaming=m.server_streaming,
            one_to_many=descriptor.full_name in _ONE_TO_MANY,
        )
        for m in descriptor.methods
    ]


METHODS: dict[str, Method] = {
    m.path: m
    for m in [
        *_methods(machine_pb2, "MachineService"),
        *_methods(state_pb2, "State"),
        *_methods(storage_pb2, "StorageService"),
    ]
}

READ_ONLY = frozenset(
    {
        "Containers", "CPUInfo", "DiskStats", "DiskUsage", "Dmesg", "EtcdAlarmList", "EtcdMemberList",
        "EtcdStatus", "Events", "Hostname", "List", "LoadAvg", "Logs", "Memory", "Mounts", "Netstat",
        "NetworkDeviceStats", "Processes", "Read", "ServiceList", "Stats", "SystemStat", "Version",
        "Get", "Watch", "Disks",
    }
)  # fmt: skip
"""The calls that only read (of the three services; the resource API's Get, List and Watch)."""

WRITES = frozenset(
    {
        "Reboot", "Shutdown", "Restart", "ServiceStart", "ServiceStop", "ServiceRestart",
        "EtcdForfeitLeadership", "EtcdAlarmDisarm", "EtcdDefragment",
    }
)  # fmt: skip
"""The calls that change a machine and still go through: none touches what herder manages."""

TALOS_ONLY = frozenset(
    {
        "CPUFreqStats", "Copy", "EtcdDowngradeCancel", "EtcdDowngradeEnable", "EtcdDowngradeValidate",
        "GenerateClientConfiguration", "ImageList", "ImagePull", "LogsContainers", "MetaDelete", "MetaWrite",
        "PacketCapture", "Rollback",
    }
)  # fmt: skip
"""The machine API's other methods, which herder does not speak: refused like the calls herder manages,
rather than answered as unknown."""

_TALOS_ONLY_PATHS = frozenset(
    {f"/{roles.SERVICE}/{name}" for name in TALOS_ONLY} | {f"/{roles.STORAGE_SERVICE}/BlockDeviceWipe"}
)
"""The same, as full names, with the storage API's one other method (it wipes a disk)."""

_SERVICES = frozenset({roles.SERVICE, roles.RESOURCE_SERVICE, roles.STORAGE_SERVICE})


def let_through(method: Method) -> bool:
    """Whether the gateway relays the method (to callers whose Talos role allows it)."""
    return method.service in _SERVICES and method.name in READ_ONLY | WRITES


def refusal(method: Method) -> str:
    """Why a known method is not relayed (PERMISSION_DENIED), naming it."""
    return (
        f"{method.path} is not allowed through herder's Talos API gateway: herder manages what it changes. "
        "Allowed are the calls that read, and Reboot, Shutdown, Restart, ServiceStart, ServiceStop, "
        "ServiceRestart, EtcdForfeitLeadership, EtcdAlarmDisarm and EtcdDefragment"
    )


def known(method: Method) -> bool:
    """Whether the method is one of the Talos API's (relayed or refused), rather than unknown."""
    return method.path in METHODS or method.path in _TALOS_ONLY_PATHS
