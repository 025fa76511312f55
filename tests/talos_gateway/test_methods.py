"""What the gateway does with each call of Talos's own machine API (tests/data/talos/proto): every rpc Talos
declares is either relayed or refused by name, never answered as unknown, and the calls the issue lists as
read-only and as admin writes are the ones relayed."""

from __future__ import annotations

import re
from pathlib import Path

from herder.talos.machine import roles
from herder.talos_gateway.methods import METHODS, READ_ONLY, WRITES, Method, known, let_through

TALOS_MACHINE_PROTO = Path(__file__).parents[1] / "data/talos/proto/machine/machine.proto"

# talosctl's read-only calls and the writes Omni lets an os:admin make (issue 27, part 1).
READS_TALOSCTL_NEEDS = {
    "Hostname", "Memory", "LoadAvg", "Processes", "SystemStat", "CPUInfo", "DiskStats",
    "NetworkDeviceStats", "Mounts", "DiskUsage", "Containers", "Stats", "Logs", "Dmesg", "Read", "List",
    "Netstat", "EtcdStatus", "EtcdAlarmList", "EtcdMemberList", "ServiceList", "Version", "Events",
}  # fmt: skip
ADMIN_WRITES = {
    "Reboot", "Shutdown", "Restart", "ServiceStart", "ServiceStop", "ServiceRestart",
    "EtcdForfeitLeadership", "EtcdAlarmDisarm", "EtcdDefragment",
}  # fmt: skip


def _talos_rpcs() -> set[str]:
    service = TALOS_MACHINE_PROTO.read_text().split("service MachineService {", 1)[1].split("\n}", 1)[0]
    return set(re.findall(r"^\s*rpc\s+(\w+)\s*\(", service, re.MULTILINE))


def _method(name: str) -> Method:
    path = f"/{roles.SERVICE}/{name}"
    found = METHODS.get(path)
    return found or Method(roles.SERVICE, path, name, False, False, True)


def test_every_rpc_of_talos_machine_api_is_relayed_or_refused_by_name() -> None:
    rpcs = _talos_rpcs()
    assert len(rpcs) > 50, "the rpcs of Talos's MachineService were not read"
    assert [name for name in sorted(rpcs) if not known(_method(name))] == []


def test_the_calls_relayed_are_talosctls_reads_and_the_admin_writes_only() -> None:
    relayed = {name for name in _talos_rpcs() if let_through(_method(name))}
    assert relayed == READS_TALOSCTL_NEEDS | ADMIN_WRITES
    assert READS_TALOSCTL_NEEDS <= READ_ONLY and ADMIN_WRITES == WRITES


def test_calls_that_change_what_herder_manages_are_refused() -> None:
    for name in ("ApplyConfiguration", "Upgrade", "Reset", "Bootstrap", "EtcdLeaveCluster", "Kubeconfig"):
        assert known(_method(name)) and not let_through(_method(name)), name


def test_of_the_storage_api_disks_goes_through_and_a_disk_wipe_is_refused_by_name() -> None:
    storage = Path(__file__).parents[1] / "data/talos/proto/storage/storage.proto"
    rpcs = set(re.findall(r"^\s*rpc\s+(\w+)\s*\(", storage.read_text(), re.MULTILINE))
    assert rpcs == {"Disks", "BlockDeviceWipe"}
    disks = METHODS[f"/{roles.STORAGE_SERVICE}/Disks"]
    assert let_through(disks) and disks.one_to_many
    wipe = Method(
        roles.STORAGE_SERVICE,
        f"/{roles.STORAGE_SERVICE}/BlockDeviceWipe",
        "BlockDeviceWipe",
        False,
        False,
        True,
    )
    assert known(wipe) and not let_through(wipe)


def test_the_resource_api_reads_go_through_and_nothing_else_of_it() -> None:
    resource = {m.name for m in METHODS.values() if m.service == roles.RESOURCE_SERVICE}
    assert {name for name in resource if let_through(METHODS[f"/{roles.RESOURCE_SERVICE}/{name}"])} == {
        "Get",
        "List",
        "Watch",
    }
