"""What an emulated machine answers on the Talos machine API: each call's request checked as machined checks
it, the machine's state read or a lifecycle sequence started (``lifecycle``), what its kernel and runtime
report computed at the moment of the call (``system``) or read from its logs (``logs``), and the reply as
Talos's message. ``service`` routes the gRPC calls here.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import posixpath
import re
import tarfile
import time

import grpc

from herder.emu.cluster.state import Cluster
from herder.emu.errors import ApiError, invalid, not_authorized, precondition
from herder.emu.machine import files as machine_files
from herder.emu.machine import system
from herder.emu.machine.config import (
    ConfigError,
    MachineConfig,
    config_diff,
    parse_config,
    reboot_required_diff,
)
from herder.emu.machine.kube_config import kube_facts
from herder.emu.machine.lifecycle import Machine
from herder.emu.machine.logs import LogBuffer, LogLine
from herder.emu.machine.resources import disk_specs
from herder.emu.machine.system import CRI_NAMESPACE, SYSTEM_NAMESPACE, Host
from herder.talos.api.common import common_pb2
from herder.talos.api.machine import machine_pb2 as pb
from herder.talos.api.storage import storage_pb2
from herder.talos.kubeconfig import generate_admin_kubeconfig
from herder.talos.machine import roles as talos_roles
from herder.talos.machine.resources import DiskSpec
from herder.talos.machine.types import ApplyMode, MachineStage

_IMAGE_TAG = re.compile(r"^[^\s@]+:(v?\d+\.\d+\.\d+[0-9A-Za-z.\-+]*)$")


def version(machine: Machine) -> pb.Version:
    tag = machine.record.talos_version
    return pb.Version(
        version=pb.VersionInfo(
            tag=tag,
            sha=hashlib.sha1(tag.encode()).hexdigest()[:8],
            built="",
            go_version="go1.24.6",
            os="linux",
            arch="amd64",
        ),
        platform=pb.PlatformInfo(name="metal", mode="metal"),
        features=pb.FeaturesInfo(rbac=machine.config.rbac if machine.config else True),
    )


# --- configuration ---


def apply_configuration(
    machine: Machine, request: pb.ApplyConfigurationRequest, roles: frozenset[str]
) -> pb.ApplyConfiguration:
    mode = ApplyMode(request.mode)
    if machine.in_maintenance:
        return _apply_in_maintenance(machine, request, mode)
    if talos_roles.ADMIN not in roles:
        raise not_authorized()
    if machine.stage in (MachineStage.INSTALLING, MachineStage.UPGRADING, MachineStage.RESETTING):
        raise precondition(f"locked: the machine is {machine.stage.name.lower()}")
    new = _parse_request(machine, request)
    current = machine.config
    assert current is not None
    if mode is ApplyMode.TRY or mode is ApplyMode.NO_REBOOT or mode is ApplyMode.AUTO:
        diff = reboot_required_diff(current, new)
    else:
        diff = ""
    if mode is ApplyMode.AUTO:
        mode = ApplyMode.REBOOT if diff else ApplyMode.NO_REBOOT
    elif diff:
        raise invalid(f"this config change can't be applied in immediate mode\ndiff:\n{diff}")
    details = {
        ApplyMode.REBOOT: "Applied configuration with a reboot",
        ApplyMode.NO_REBOOT: "Applied configuration without a reboot",
        ApplyMode.STAGED: "Staged configuration to be applied after the next reboot",
        ApplyMode.TRY: "Applied configuration without a reboot",
    }[mode]
    if diff and mode is ApplyMode.REBOOT:
        details += f": this config change can't be applied in immediate mode\ndiff:\n{diff}"
    if request.dry_run:
        changes = config_diff(current.text, new.text) or "No changes."
        return pb.ApplyConfiguration(
            mode=int(mode),  # type: ignore[arg-type]
            mode_details=f"Dry run summary:\n{details} (skipped in dry-run).\nConfig diff:\n\n{changes}",
            warnings=list(new.warnings),
        )
    timeout = machine.host.timings.try_timeout
    if mode is ApplyMode.TRY:
        if request.HasField("try_mode_timeout"):
            timeout = request.try_mode_timeout.ToTimedelta().total_seconds()
        details += (
            f"\nThe config is applied in 'try' mode and will be automatically reverted back in {timeout}s"
        )
    machine.apply(new, mode, try_timeout=timeout)
    return pb.ApplyConfiguration(mode=int(mode), mode_details=details, warnings=list(new.warnings))  # type: ignore[arg-type]


def _apply_in_maintenance(
    machine: Machine, request: pb.ApplyConfigurationRequest, mode: ApplyMode
) -> pb.ApplyConfiguration:
    if mode in (ApplyMode.STAGED, ApplyMode.TRY):
        name = mode.name.lower().replace("_", "-")
        raise ApiError(
            grpc.StatusCode.UNIMPLEMENTED,
            f"apply configuration --mode='{name}' is not supported in maintenance mode",
        )
    new = _parse_request(machine, request)
    if request.dry_run:
        return pb.ApplyConfiguration(
            mode=int(ApplyMode.NO_REBOOT),  # type: ignore[arg-type]
            mode_details="Dry run summary:\nNode is running in maintenance mode and does not have a config yet.",
            warnings=list(new.warnings),
        )
    if machine.busy:
        raise precondition("another apply configuration is already in progress")
    machine.install(new)
    return pb.ApplyConfiguration(
        mode=int(ApplyMode.NO_REBOOT),  # type: ignore[arg-type]
        mode_details="Applied configuration without a reboot",
        warnings=list(new.warnings),
    )


def _parse_request(machine: Machine, request: pb.ApplyConfigurationRequest) -> MachineConfig:
    try:
        new = parse_config(request.data, machine.record.talos_version)
    except ConfigError as e:
        machine.reject_config(e)
        raise invalid(str(e)) from None
    if machine.config is not None and new.machine_type != machine.config.machine_type:
        raise invalid(
            f"1 error occurred:\n\t* machine type can't be changed from {machine.config.machine_type!r} "
            f"to {new.machine_type!r}\n\n"
        )
    return new


# --- lifecycle ---


def reboot(machine: Machine) -> pb.Reboot:
    return pb.Reboot(actor_id=machine.reboot())


def upgrade(machine: Machine, request: pb.UpgradeRequest) -> pb.Upgrade:
    machine.require_running()
    match = _IMAGE_TAG.match(request.image)
    if match is None:
        raise invalid(f"invalid installer image reference {request.image!r}: expected NAME:vX.Y.Z")
    target = match.group(1) if match.group(1).startswith("v") else "v" + match.group(1)
    return pb.Upgrade(ack="Upgrade request received", actor_id=machine.upgrade(target, stage=request.stage))


def reset(machine: Machine, request: pb.ResetRequest) -> pb.Reset:
    actor = machine.reset(graceful=request.graceful, reboot=request.reboot, wipe_state=_wipes_state(request))
    return pb.Reset(actor_id=actor)


def _wipes_state(request: pb.ResetRequest) -> bool:
    """Whether a reset wipes the STATE partition (where the config lives): by default it wipes everything."""
    if request.mode == pb.ResetRequest.USER_DISKS:
        return False
    labels = [p.label for p in request.system_partitions_to_wipe if p.wipe]
    return not request.system_partitions_to_wipe or "STATE" in labels


def shutdown(machine: Machine) -> pb.Shutdown:
    return pb.Shutdown(actor_id=machine.shutdown())


def service_infos(machine: Machine) -> list[pb.ServiceInfo]:
    return [
        pb.ServiceInfo(
            id=state.name,
            state=state.state,
            health=pb.ServiceHealth(unknown=False, healthy=state.healthy, last_message=state.message),
        )
        for state in machine.service_states()
    ]


def services(machine: Machine) -> pb.ServiceList:
    return pb.ServiceList(services=service_infos(machine))


# Only the kubelet may be started, stopped and restarted through the API (and extension services, which
# the emulator's machines have none of), as on Talos.
_API_CONTROLLED = frozenset({"kubelet"})


def _service(machine: Machine, name: str) -> bool:
    """Whether the service runs (``not defined`` if the machine has no such service)."""
    if name not in machine.service_names():
        raise ApiError(grpc.StatusCode.UNKNOWN, f'service "{name}" not defined')
    return name not in machine.stopped_services and machine.stage is MachineStage.RUNNING


def _refuse(name: str, operation: str) -> ApiError:
    return ApiError(
        grpc.StatusCode.UNKNOWN, f'service "{name}" doesn\'t support {operation} operation via API'
    )


def service_start(machine: Machine, request: pb.ServiceStartRequest) -> pb.ServiceStart:
    if not _service(machine, request.id):
        if request.id not in _API_CONTROLLED:
            raise _refuse(request.id, "start")
        machine.stopped_services.discard(request.id)
        machine.refresh_resources()
        machine.logs.write("machined", f"service[{request.id}](Running): Started by the API")
    return pb.ServiceStart(resp=f'Service "{request.id}" started')


def service_stop(machine: Machine, request: pb.ServiceStopRequest) -> pb.ServiceStop:
    if _service(machine, request.id):
        if request.id not in _API_CONTROLLED:
            raise _refuse(request.id, "stop")
        machine.stopped_services.add(request.id)
        machine.refresh_resources()
        machine.logs.write("machined", f"service[{request.id}](Finished): Service finished successfully")
    return pb.ServiceStop(resp=f'Service "{request.id}" stopped')


def service_restart(machine: Machine, request: pb.ServiceRestartRequest) -> pb.ServiceRestart:
    if not _service(machine, request.id):
        service_start(machine, pb.ServiceStartRequest(id=request.id))
    elif request.id not in _API_CONTROLLED:
        raise _refuse(request.id, "restart")
    else:
        machine.logs.write(
            "machined", f"service[{request.id}](Stopping): Sending SIGTERM to task {request.id}"
        )
        machine.logs.write("machined", f"service[{request.id}](Running): Restarted by the API")
        if request.id == "kubelet":
            machine.logs.write("kubelet", f'"Successfully registered node" node="{machine.hostname}"')
    return pb.ServiceRestart(resp=f'Service "{request.id}" restarted')


# --- what the machine's kernel and runtime report (computed now: see ``system``) ---


def host_of(machine: Machine) -> Host:
    config = machine.config
    running = tuple(s.name for s in machine.service_states() if s.running)
    return Host(
        uuid=machine.uuid,
        hostname=machine.hostname,
        address=machine.address,
        hardware=machine.record.hardware,
        booted_at=machine.booted_at,
        talos_version=machine.record.talos_version,
        services=running,
        control_plane=config is not None and config.is_control_plane,
        kubernetes=kube_facts(config) if config is not None else None,
    )


def hostname(machine: Machine) -> pb.Hostname:
    return pb.Hostname(hostname=machine.hostname)


def memory(machine: Machine) -> pb.Memory:
    return pb.Memory(meminfo=system.memory(host_of(machine), time.time()))


def load_avg(machine: Machine) -> pb.LoadAvg:
    load1, load5, load15 = system.load_avg(host_of(machine), time.time())
    return pb.LoadAvg(load1=load1, load5=load5, load15=load15)


def processes(machine: Machine) -> pb.Process:
    return pb.Process(processes=system.processes(host_of(machine), time.time()))


def system_stat(machine: Machine) -> pb.SystemStat:
    return system.system_stat(host_of(machine), time.time())


def cpu_info(machine: Machine) -> pb.CPUsInfo:
    return pb.CPUsInfo(cpu_info=system.cpu_info(host_of(machine)))


def disk_stats(machine: Machine) -> pb.DiskStats:
    return system.disk_stats(host_of(machine), time.time())


def disks(machine: Machine) -> storage_pb2.Disks:
    """The storage API's ``Disks``: the machine's ``Disks`` resources as storaged converts them, the one it
    is installed on its system disk."""
    answer = storage_pb2.Disks()
    for index, (id, spec) in enumerate(disk_specs(machine.record.hardware)):
        answer.disks.append(
            storage_pb2.Disk(
                device_name=f"/dev/{id}",
                model=spec.model,
                size=spec.size,
                serial=spec.serial,
                modalias=spec.modalias,
                wwid=spec.wwid,
                uuid=spec.uuid,
                type=_disk_type(spec),
                bus_path=spec.bus_path,
                system_disk=machine.record.installed and index == 0,
                subsystem=spec.sub_system,
                readonly=spec.readonly,
            )
        )
    return answer


def _disk_type(spec: DiskSpec) -> storage_pb2.Disk.DiskType:
    """As storaged tells them apart, in its order."""
    if spec.cdrom:
        return storage_pb2.Disk.CD
    if spec.transport == "nvme":
        return storage_pb2.Disk.NVME
    if spec.transport == "mmc":
        return storage_pb2.Disk.SD
    if spec.rotational:
        return storage_pb2.Disk.HDD
    return storage_pb2.Disk.SSD if spec.transport else storage_pb2.Disk.UNKNOWN


def network_device_stats(machine: Machine) -> pb.NetworkDeviceStats:
    return system.network_device_stats(host_of(machine), time.time())


def mounts(machine: Machine) -> pb.Mounts:
    return pb.Mounts(stats=system.mounts(host_of(machine), time.time()))


def _runtime(namespace: str, driver: int) -> bool:
    """Whether a containers call means the CRI (Kubernetes) rather than containerd's system namespace."""
    if driver == common_pb2.CRI or namespace == CRI_NAMESPACE:
        return True
    if namespace not in ("", SYSTEM_NAMESPACE):
        raise invalid(f"unsupported namespace {namespace!r}: expected {SYSTEM_NAMESPACE} or {CRI_NAMESPACE}")
    return False


def containers(machine: Machine, request: pb.ContainersRequest) -> pb.Container:
    cri = _runtime(request.namespace, request.driver)
    return pb.Container(
        containers=[v.info for v in system.containers(host_of(machine), time.time(), cri=cri)]
    )


def stats(machine: Machine, request: pb.StatsRequest) -> pb.Stats:
    cri = _runtime(request.namespace, request.driver)
    return pb.Stats(stats=[v.stat for v in system.containers(host_of(machine), time.time(), cri=cri)])


def restart(machine: Machine, request: pb.RestartRequest) -> pb.Restart:
    cri = _runtime(request.namespace, request.driver)
    host = host_of(machine)
    found = [
        v
        for v in system.containers(host, time.time(), cri=cri)
        if request.id in (v.info.id, v.info.name) or request.id == v.info.pod_id != ""
    ]
    if not found:
        raise ApiError(grpc.StatusCode.UNKNOWN, f'container "{request.id}" not found')
    machine.logs.write("machined", f"container {found[0].info.id}: killed with SIGTERM, restarting")
    return pb.Restart()


def netstat(machine: Machine, request: pb.NetstatRequest) -> pb.Netstat:
    return pb.Netstat(connectrecord=system.netstat(host_of(machine), time.time(), request))


# --- logs ---


def log_source(machine: Machine, request: pb.LogsRequest) -> tuple[LogBuffer | None, list[bytes]]:
    """Where ``Logs`` reads: a service's log (system namespace, or the kubelet), which can be followed, or a
    Kubernetes container's lines."""
    if (
        request.namespace in ("", SYSTEM_NAMESPACE) and request.driver != common_pb2.CRI
    ) or request.id == "kubelet":
        if request.id not in machine.service_names():
            raise ApiError(grpc.StatusCode.NOT_FOUND, f'log "{request.id}" was not registered')
        return machine.logs.buffer(request.id), []
    host = host_of(machine)
    view = system.find_pod_container(host, time.time(), request.id)
    if view is None:
        raise ApiError(grpc.StatusCode.NOT_FOUND, f'container "{request.id}" not found')
    lines = system.pod_logs(host, view.info.name, time.time())
    if request.tail_lines >= 0:
        lines = lines[len(lines) - request.tail_lines :] if request.tail_lines else []
    return None, [line.encode() + b"\n" for line in lines]


def log_text(line: LogLine) -> bytes:
    return line.text.encode() + b"\n"


# --- files ---


def _files(machine: Machine) -> dict[str, machine_files.File]:
    host, now = host_of(machine), time.time()
    info = system.memory(host, now)
    meminfo = "".join(
        f"{_MEMINFO_NAMES.get(field.name, field.name)}:{value:>16} kB\n"
        for field, value in info.ListFields()
        if field.name not in ("hugepagestotal", "hugepagesfree", "hugepagesrsvd", "hugepagessurp")
    )
    load1, load5, load15 = system.load_avg(host, now)
    count = len(system.processes(host, now))
    loadavg = f"{load1:.2f} {load5:.2f} {load15:.2f} 1/{count} {4000 + int(now) % 1000}\n"
    cpuinfo = "\n".join(
        f"processor\t: {c.processor}\nvendor_id\t: {c.vendor_id}\nmodel name\t: {c.model_name}\n"
        f"cpu MHz\t\t: {c.cpu_mhz}\ncpu cores\t: {c.cpu_cores}\nflags\t\t: {' '.join(c.flags)}\n"
        for c in system.cpu_info(host)
    )
    config = machine.config.raw if machine.config is not None else None
    return machine_files.files(
        host, now, memory_text=meminfo, loadavg_text=loadavg, cpuinfo_text=cpuinfo, config=config
    )


_MEMINFO_NAMES = {
    "memtotal": "MemTotal",
    "memfree": "MemFree",
    "memavailable": "MemAvailable",
    "buffers": "Buffers",
    "cached": "Cached",
    "active": "Active",
    "inactive": "Inactive",
    "anonpages": "AnonPages",
    "mapped": "Mapped",
    "shmem": "Shmem",
    "slab": "Slab",
    "kernelstack": "KernelStack",
    "pagetables": "PageTables",
    "commitlimit": "CommitLimit",
    "committedas": "Committed_AS",
    "vmalloctotal": "VmallocTotal",
    "vmallocused": "VmallocUsed",
    "hugepagesize": "Hugepagesize",
}


def read(machine: Machine, request: pb.ReadRequest) -> bytes:
    path = posixpath.normpath(request.path or "/")
    file = _files(machine).get(path)
    if file is None:
        raise ApiError(grpc.StatusCode.NOT_FOUND, f"stat {request.path}: no such file or directory")
    if file.content is None:
        raise ApiError(grpc.StatusCode.UNKNOWN, "path must be a regular file")
    return file.content()


def _under(files: dict[str, machine_files.File], root: str, depth: int) -> list[tuple[str, int]]:
    """The paths below ``root`` (itself first), each with its depth, to ``depth`` levels (0: all)."""
    prefix = root.rstrip("/") + "/"
    out = [(root, 0)]
    for path in sorted(files):
        if path != root and path.startswith(prefix):
            level = path[len(prefix) :].count("/") + 1
            if depth <= 0 or level <= depth:
                out.append((path, level))
    return out


def list_files(machine: Machine, request: pb.ListRequest) -> list[pb.FileInfo]:
    files = _files(machine)
    root = posixpath.normpath(request.root or "/")
    if root not in files:
        return [pb.FileInfo(name=root, error=f"lstat {root}: no such file or directory")]
    depth = request.recursion_depth if request.recurse else 1
    if request.recurse and request.recursion_depth == 0:
        depth = 0
    wanted = set(request.types)
    out = []
    for path, _level in _under(files, root, depth):
        file = files[path]
        kind = (
            pb.ListRequest.DIRECTORY
            if file.is_dir
            else pb.ListRequest.SYMLINK
            if file.link
            else pb.ListRequest.REGULAR
        )
        if wanted and kind not in wanted:
            continue
        out.append(
            pb.FileInfo(
                name=path,
                size=file.size,
                mode=file.mode,
                modified=int(file.modified),
                is_dir=file.is_dir,
                link=file.link,
                relative_name="." if path == root else posixpath.relpath(path, root),
            )
        )
    return out


def disk_usage(machine: Machine, request: pb.DiskUsageRequest) -> list[pb.DiskUsageInfo]:
    files = _files(machine)
    out = []
    for given in request.paths or ["/"]:
        root = posixpath.normpath(given)
        if root not in files:
            out.append(pb.DiskUsageInfo(name=root, error=f"lstat {root}: no such file or directory"))
            continue
        entries = _under(files, root, 0)
        sizes = {path: 0 if files[path].is_dir else files[path].size for path, _ in entries}
        for path, _level in sorted(entries, key=lambda e: -e[1]):
            if path != root:
                parent = posixpath.dirname(path)
                if parent in sizes:
                    sizes[parent] += sizes[path]
        for path, level in entries:
            file = files[path]
            if not (file.is_dir or request.all) and path != root:
                continue
            if request.recursion_depth > 0 and level > request.recursion_depth:
                continue
            size = sizes[path]
            if request.threshold > 0 and size < request.threshold:
                continue
            if request.threshold < 0 and size > -request.threshold:
                continue
            relative = "." if path == root else posixpath.relpath(path, root)
            out.append(pb.DiskUsageInfo(name=path, size=size, relative_name=relative))
    return out


# --- etcd and Kubernetes ---


def _control_plane(machine: Machine, operation: str) -> tuple[MachineConfig, Cluster]:
    config = machine.require_running()
    cluster = machine.cluster
    if not config.is_control_plane or cluster is None:
        raise precondition(f"{operation} is only supported on control plane nodes")
    return config, cluster


def _etcd_member(machine: Machine, operation: str) -> tuple[Cluster, int]:
    _config, cluster = _control_plane(machine, operation)
    member = cluster.member_of(machine.uuid)
    if member is None:
        raise precondition("etcd is not running on this node")
    return cluster, member.id


def bootstrap(machine: Machine, request: pb.BootstrapRequest) -> pb.Bootstrap:
    if machine.config is None or machine.stage is not MachineStage.RUNNING:
        raise precondition("bootstrap is not available yet")
    config, cluster = _control_plane(machine, "bootstrap")
    if not config.has_etcd_ca:
        raise invalid("etcd is not configured, bootstrap is not possible")
    snapshot = None
    if request.recover_etcd:
        if machine.recover_snapshot is None:
            raise precondition("etcd snapshot is not uploaded, use EtcdRecover first")
        snapshot = machine.recover_snapshot
    cluster.bootstrap(machine.uuid, machine.hostname, machine.address, snapshot)
    machine.logs.write("machined", "bootstrap request received")
    machine.logs.write(
        "etcd",
        "recovered the cluster from the uploaded snapshot" if snapshot else "bootstrapped a new etcd cluster",
    )
    machine.recover_snapshot = None
    for peer in machine.host.machines_of(cluster.id):
        if peer.config is not None and peer.config.is_control_plane and peer.stage is MachineStage.RUNNING:
            cluster.join(peer.uuid, peer.hostname, peer.address)
    machine.host.store.save_cluster(cluster)
    return pb.Bootstrap()


def etcd_members(machine: Machine) -> pb.EtcdMembers:
    cluster, _member = _etcd_member(machine, "etcd members")
    return pb.EtcdMembers(
        members=[
            pb.EtcdMember(id=m.id, hostname=m.hostname, peer_urls=m.peer_urls, client_urls=m.client_urls)
            for m in cluster.members.values()
        ]
    )


def etcd_status(machine: Machine) -> pb.EtcdStatus:
    cluster, member = _etcd_member(machine, "etcd status")
    leader, size, index, term = cluster.status_of(member)
    status = pb.EtcdMemberStatus(
        member_id=member,
        leader=leader,
        db_size=size,
        db_size_in_use=size,
        raft_index=index,
        raft_term=term,
        raft_applied_index=index,
        protocol_version="3.5.0",
        storage_version="3.5.0",
    )
    return pb.EtcdStatus(member_status=status)


def etcd_leave(machine: Machine) -> pb.EtcdLeaveCluster:
    cluster, member = _etcd_member(machine, "etcd leave")
    cluster.remove(member)
    machine.logs.write("etcd", f"removed member {member:x} from the cluster: this node left")
    machine.host.store.save_cluster(cluster)
    return pb.EtcdLeaveCluster()


def etcd_forfeit_leadership(machine: Machine) -> pb.EtcdForfeitLeadership:
    cluster, _member = _etcd_member(machine, "etcd forfeit leadership")
    leader = cluster.forfeit_leadership(machine.uuid)
    machine.host.store.save_cluster(cluster)
    if leader:
        machine.logs.write("etcd", "leadership transferred to another member")
    return pb.EtcdForfeitLeadership(member=leader)


def etcd_remove_member(machine: Machine, request: pb.EtcdRemoveMemberByIDRequest) -> pb.EtcdRemoveMemberByID:
    cluster, _member = _etcd_member(machine, "etcd remove member")
    cluster.remove(request.member_id)
    machine.host.store.save_cluster(cluster)
    return pb.EtcdRemoveMemberByID()


def etcd_alarms(machine: Machine) -> pb.EtcdAlarm:
    """etcd's alarms (an emulated etcd never runs out of space, nor is corrupt: none)."""
    _etcd_member(machine, "etcd alarm list")
    return pb.EtcdAlarm(member_alarms=[])


def etcd_alarm_disarm(machine: Machine) -> pb.EtcdAlarmDisarm:
    _etcd_member(machine, "etcd alarm disarm")
    return pb.EtcdAlarmDisarm(member_alarms=[])


def etcd_defragment(machine: Machine) -> pb.EtcdDefragment:
    cluster, member = _etcd_member(machine, "etcd defragment")
    _leader, size, _index, _term = cluster.status_of(member)
    machine.logs.write(
        "etcd", f"finished defragmenting directory /var/lib/etcd/member/snap/db ({size} bytes)"
    )
    return pb.EtcdDefragment()


def etcd_snapshot(machine: Machine) -> bytes:
    cluster, _member = _etcd_member(machine, "etcd snapshot")
    return cluster.snapshot()


def etcd_recover(machine: Machine, snapshot: bytes) -> None:
    _control_plane(machine, "etcd recover")
    machine.recover_snapshot = snapshot


def kubeconfig(machine: Machine) -> bytes:
    config, _cluster = _control_plane(machine, "kubeconfig")
    if config.kubernetes_ca is None or not config.endpoint:
        raise precondition("k8s API server CA config is not set")
    # As Talos: the cluster endpoint of the config (a control plane's https://IP:6443, or a load
    # balancer in front of them), which the emulator does not serve itself.
    text = generate_admin_kubeconfig(
        config.kubernetes_ca, cluster_name=config.cluster_name or "talos", endpoint=config.endpoint
    )
    return _tar_gz("kubeconfig", text.encode())


def _tar_gz(name: str, content: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(content)
        info.mode = 0o600
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(content))
    return gzip.compress(buffer.getvalue())
