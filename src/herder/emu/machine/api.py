"""What an emulated machine answers on the Talos machine API: each call's request checked as machined checks
it, the machine's state read or a lifecycle sequence started (``lifecycle``), and the reply as Talos's
message. ``service`` routes the gRPC calls here.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import tarfile
import time

import grpc

from herder.emu.cluster.state import Cluster
from herder.emu.errors import ApiError, invalid, not_authorized, precondition
from herder.emu.machine.config import (
    ConfigError,
    MachineConfig,
    config_diff,
    parse_config,
    reboot_required_diff,
)
from herder.emu.machine.lifecycle import Machine
from herder.talos.api.machine import machine_pb2 as pb
from herder.talos.kubeconfig import generate_admin_kubeconfig
from herder.talos.machine import roles as talos_roles
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


def services(machine: Machine) -> pb.ServiceList:
    running = machine.stage is MachineStage.RUNNING
    names = ["apid", "machined", "udevd"]
    if machine.config is not None:
        names += ["containerd", "cri", "kubelet"]
        if machine.config.is_control_plane:
            names += ["etcd", "trustd"]
    infos = []
    for name in sorted(names):
        healthy = running or name in ("apid", "machined", "udevd")
        if name == "etcd":
            cluster = machine.cluster
            healthy = running and cluster is not None and cluster.member_healthy(machine.uuid)
        state = "Running" if healthy else "Preparing"
        message = "" if healthy else ("waiting for etcd bootstrap" if name == "etcd" else "waiting for boot")
        infos.append(
            pb.ServiceInfo(
                id=name,
                state=state,
                health=pb.ServiceHealth(unknown=False, healthy=healthy, last_message=message),
            )
        )
    return pb.ServiceList(services=infos)


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
    machine.host.store.save_cluster(cluster)
    return pb.EtcdLeaveCluster()


def etcd_forfeit_leadership(machine: Machine) -> pb.EtcdForfeitLeadership:
    cluster, _member = _etcd_member(machine, "etcd forfeit leadership")
    leader = cluster.forfeit_leadership(machine.uuid)
    machine.host.store.save_cluster(cluster)
    return pb.EtcdForfeitLeadership(member=leader)


def etcd_remove_member(machine: Machine, request: pb.EtcdRemoveMemberByIDRequest) -> pb.EtcdRemoveMemberByID:
    cluster, _member = _etcd_member(machine, "etcd remove member")
    cluster.remove(request.member_id)
    machine.host.store.save_cluster(cluster)
    return pb.EtcdRemoveMemberByID()


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
