"""One emulated Talos machine and its lifecycle: maintenance → installing → booting → running, reboot,
upgrade, reset, shutdown, power, faults. What it answers on the machine API is ``api``'s: that module checks a
request and starts what it asks for here.

Stages and events follow machined's (``MachineStatusEvent``, ``SequenceEvent``); the durations come from
``Timings``. Whatever a real machine keeps on disk (its config, whether it is installed, its version, its
power state) is persisted at once; what it keeps in memory (events, a config applied in TRY mode, an
uploaded etcd snapshot, a sequence in progress) is lost when it crashes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ssl
import time
import uuid as uuidlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

from herder.emu.cluster.kubelet import Kubelet
from herder.emu.cluster.state import Cluster
from herder.emu.errors import ApiError, precondition
from herder.emu.machine import certs
from herder.emu.machine.config import (
    ConfigError,
    MachineConfig,
    parse_config,
)
from herder.emu.machine.events import EventLog
from herder.emu.machine.firmware import Firmware
from herder.emu.machine.join import Joiner, JoinFailed
from herder.emu.machine.kube_config import kube_facts
from herder.emu.machine.logs import LogLine, MachineLogs, boot_messages
from herder.emu.machine.network import GRACE, Network
from herder.emu.machine.record import MachineRecord
from herder.emu.machine.resources import (
    ResourceState,
    address_resources,
    hardware_resources,
    hostname_resource,
    status_resource,
)
from herder.emu.options import FAULTS
from herder.emu.timings import Timings
from herder.talos.api.common import common_pb2
from herder.talos.api.machine import machine_pb2 as pb
from herder.talos.machine import tls as machine_tls
from herder.talos.machine.types import ApplyMode, MachineStage
from herder.talos.pki import CertificateAndKey
from herder.talos.siderolink.kernel_args import JoinArgsError, configured
from herder.talos.versions import check_talos_upgrade


class SequenceFailed(Exception):
    """A sequence ended in error; the machine reports it in the sequence's stop event."""


@dataclass(frozen=True)
class ServiceState:
    """A service of the machine as machined reports it."""

    name: str
    state: str
    """``Running``, ``Preparing``, ``Finished``."""
    healthy: bool
    message: str

    @property
    def running(self) -> bool:
        return self.state == "Running"


class MachineStore(Protocol):
    """Where a machine persists what a real one keeps on disk, and its cluster's state."""

    def save_machine(self, record: MachineRecord) -> None: ...

    def load_machine(self, uuid: str) -> MachineRecord | None: ...

    def save_cluster(self, cluster: Cluster) -> None: ...


class MachineHost(Protocol):
    """What a machine needs of the emulator it runs in (the emulator provides it; a machine never sees more)."""

    @property
    def timings(self) -> Timings: ...

    @property
    def network(self) -> Network: ...

    @property
    def joiner(self) -> Joiner | None:
        """How machines join herder over SideroLink (``--join``), if they do."""
        ...

    @property
    def store(self) -> MachineStore: ...

    def cluster(self, cluster_id: str) -> Cluster:
        """The cluster of that id, created on first use."""
        ...

    def machines_of(self, cluster_id: str) -> list[Machine]:
        """The machines configured for that cluster."""
        ...

    def machine_changed(self, machine: Machine) -> None:
        """The machine's stage, config or reachability changed: its cluster follows."""
        ...


class Machine:
    def __init__(self, host: MachineHost, record: MachineRecord) -> None:
        self.host = host
        self.record = record
        self.config: MachineConfig | None = None
        """The active config (a TRY config until it is reverted or confirmed)."""
        self.stage = MachineStage.UNKNOWN
        self.ready = False
        self.unmet: tuple[tuple[str, str], ...] = ()
        self.faults: set[str] = set()
        self.events = EventLog()
        self.booted_at = time.time()
        """When the machine last began to boot (what its uptime counts from)."""
        self.logs = MachineLogs(self._boot_messages)
        self.stopped_services: set[str] = set()
        """Services stopped through the API (``talosctl service kubelet stop``) until the next boot."""
        self._resources: ResourceState | None = None
        self.last_error = ""
        self.recover_snapshot: bytes | None = None
        self.api_secure = False
        self._sequence: asyncio.Task[None] | None = None
        self._sequence_name = ""
        self._try_revert: asyncio.TimerHandle | None = None
        self._api_context: tuple[tuple[bytes, str, tuple[str, ...], bytes], ssl.SSLContext] | None = None
        self.firmware: Firmware | None = None
        """What picks the system to boot at power-on (a BMC's); None: its Talos boots, as a cloud's does."""

    # --- identity ---

    @property
    def uuid(self) -> str:
        return self.record.uuid

    @property
    def address(self) -> str:
        return self.record.address

    @property
    def hostname(self) -> str:
        if self.config is not None and self.config.hostname:
            return self.config.hostname
        digest = hashlib.sha256(self.uuid.encode()).hexdigest()
        return f"talos-{digest[:3]}-{digest[3:6]}"

    @property
    def cluster(self) -> Cluster | None:
        return self.host.cluster(self.config.cluster_id) if self.config is not None else None

    @property
    def resources(self) -> ResourceState:
        """Its resources, as machined's resource API serves them (made when first asked for: most machines
        of a large emulator never are)."""
        if self._resources is None:
            self._resources = ResourceState()
            for item in (
                *hardware_resources(self.uuid, self.record.hardware),
                *address_resources(self.address),
                status_resource(self.stage, self.ready, self.unmet),
                hostname_resource(self.hostname),
            ):
                self._resources.put(*item)
        return self._resources

    def refresh_resources(self) -> None:
        """What the resources tell of the machine's stage and config, as it is now (a resource whose spec
        did not change keeps its version)."""
        if self._resources is not None:
            self._resources.put(*status_resource(self.stage, self.ready, self.unmet))
            self._resources.put(*hostname_resource(self.hostname))
            self._resources.refresh()

    @property
    def in_maintenance(self) -> bool:
        return self.config is None

    def runs_in(self, cluster_id: str) -> bool:
        """Whether it runs, reachable, configured for that cluster: its etcd and its kubelet are up."""
        return (
            self.stage is MachineStage.RUNNING
            and self.config is not None
            and self.config.cluster_id == cluster_id
            and not self.host.network.is_partitioned(self.uuid)
        )

    def kubelet(self) -> Kubelet:
        """Its kubelet, as its cluster's Kubernetes sees it (a configured machine only)."""
        config = self.config
        assert config is not None
        hardware = self.record.hardware
        return Kubelet(
            uuid=self.uuid,
            hostname=self.hostname,
            address=self.address,
            talos_version=self.record.talos_version,
            cpus=hardware.cpus,
            memory_mib=hardware.memory_mib,
            disk_bytes=int(hardware.disks[0]["size"]) if hardware.disks else 0,
            control_plane=config.is_control_plane,
            facts=kube_facts(config),
            kubernetes_ca=config.kubernetes_ca,
            kubernetes_accepted=config.kubernetes_accepted,
            up=self.runs_in(config.cluster_id),
        )

    def answers_to(self, target: str) -> bool:
        """Whether a ``node`` target names this machine (its address or hostname), as apid's local check."""
        return target in (self.address, self.hostname, self.record.endpoint)

    def summary(self) -> dict[str, Any]:
        """What the control API shows of a machine."""
        return {
            "uuid": self.uuid,
            "endpoint": self.record.endpoint,
            "node": self.address,
            "hostname": self.hostname,
            "talos_version": self.record.talos_version,
            "stage": self.stage.name,
            "ready": self.ready,
            "power": "on" if self.record.powered_on else "off",
            "installed": self.record.installed,
            "machine_type": self.config.machine_type if self.config else "",
            "cluster_id": self.config.cluster_id if self.config else "",
            "faults": sorted(self.faults),
            "last_error": self.last_error,
            "hardware": vars(self.record.hardware),
            "boots": self.record.boots,
            "bootID": self.record.boot_id,
            "configApplies": self.record.config_applies,
        }

    # --- lifecycle plumbing ---

    def start(self) -> None:
        """Bring the machine up as it was persisted (booting if powered on)."""
        if self.record.powered_on:
            self._run("boot", self._boot, takeover=True)

    async def stop(self) -> None:
        self._cancel_try()
        await self._cancel_sequence()
        self.host.network.stop(self.uuid, grace=0)

    def _busy(self) -> bool:
        return self._sequence is not None and not self._sequence.done()

    def _run(
        self, name: str, body: Callable[[], Awaitable[None]], *, actor_id: str = "", takeover: bool = False
    ) -> None:
        if self._busy():
            if not takeover:
                raise ApiError(
                    grpc.StatusCode.FAILED_PRECONDITION, f"locked: sequence {self._sequence_name} is running"
                )
            assert self._sequence is not None
            self._sequence.cancel()
        self._sequence_name = name
        self._sequence = asyncio.get_running_loop().create_task(self._sequence_body(name, body, actor_id))

    async def _sequence_body(self, name: str, body: Callable[[], Awaitable[None]], actor_id: str) -> None:
        self.events.publish(pb.SequenceEvent(sequence=name, action=pb.SequenceEvent.START), actor_id)
        self.logs.write("machined", f"{name} sequence: started")
        error = None
        try:
            await body()
        except SequenceFailed as e:
            error = str(e)
            self.last_error = error
        self.logs.write(
            "machined", f"{name} sequence: failed: {error}" if error else f"{name} sequence: done"
        )
        self.events.publish(
            pb.SequenceEvent(
                sequence=name,
                action=pb.SequenceEvent.STOP,
                error=common_pb2.Error(code=common_pb2.FATAL, message=error) if error else None,
            ),
            actor_id,
        )

    async def _cancel_sequence(self) -> None:
        task, self._sequence = self._sequence, None
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _boot_messages(self, booted_at: float) -> list[LogLine]:
        return boot_messages(self.record.hardware, self.address, self.record.talos_version, booted_at)

    def _set_stage(
        self, stage: MachineStage, *, ready: bool = False, unmet: tuple[tuple[str, str], ...] = ()
    ) -> None:
        if stage is MachineStage.BOOTING and self.stage is not MachineStage.BOOTING:
            # A new boot: the kernel and machined start afresh, with empty logs.
            self.booted_at = time.time()
            self.logs.boot(self.booted_at)
            self.stopped_services.clear()
        if stage is not self.stage:
            self.logs.write("machined", f"machine stage: {stage.name.lower().replace('_', ' ')}")
        for name, reason in unmet:
            self.logs.write("machined", f"service[{name}](Waiting): {reason}")
        self.stage, self.ready, self.unmet = stage, ready, unmet
        status = pb.MachineStatusEvent.MachineStatus(
            ready=ready,
            unmet_conditions=[
                pb.MachineStatusEvent.MachineStatus.UnmetCondition(name=n, reason=r) for n, r in unmet
            ],
        )
        self.events.publish(pb.MachineStatusEvent(stage=int(stage), status=status))  # type: ignore[arg-type]
        self.refresh_resources()
        self.host.machine_changed(self)

    async def _sleep(self, step: str) -> None:
        timings = self.host.timings
        seconds = float(getattr(timings, step))
        if step == "boot" and "slow-boot" in self.faults:
            seconds = max(seconds, timings.slow_boot)
        await asyncio.sleep(seconds)

    def _persist(self) -> None:
        self.host.store.save_machine(self.record)

    # --- apid ---

    async def _serve_maintenance(self) -> None:
        # Making a TLS context costs milliseconds of OpenSSL work that releases the GIL: a thread does it,
        # so a thousand machines booting at once use every core.
        context = await asyncio.to_thread(_maintenance_context, self.address, self.hostname)
        self.api_secure = False
        await self.host.network.serve(self.uuid, self.address, self.record.port, context, authenticated=False)
        self.logs.write(
            "machined", f"entering maintenance service: waiting for a config on {self.record.endpoint}"
        )

    async def _serve_secure(self, issuing_ca: CertificateAndKey) -> None:
        assert self.config is not None
        # apid's certificate stays valid across reboots as long as its CA, names and client CA stay the
        # same: keep the context rather than pay OpenSSL again at every boot.
        key = self._api_key(issuing_ca)
        if self._api_context is None or self._api_context[0] != key:
            context = await asyncio.to_thread(_api_context, issuing_ca, self.address, *key[1:])
            self._api_context = (key, context)
        context = self._api_context[1]
        self.api_secure = True
        await self.host.network.serve(self.uuid, self.address, self.record.port, context, authenticated=True)
        self.logs.write(
            "apid", f"apid listening on {self.record.endpoint} (mutual TLS with the cluster's Talos CA)"
        )

    def _api_key(self, issuing_ca: CertificateAndKey) -> tuple[bytes, str, tuple[str, ...], bytes]:
        assert self.config is not None
        return (issuing_ca.crt, self.hostname, self.config.cert_sans, self.config.talos_client_ca)

    def _refresh_api(self) -> None:
        """A config taken without a reboot that changes apid's CAs (a CA rotation's steps): apid takes its
        new certificate and client CAs for new connections at once, and open ones go on, as Talos's apid
        reloads its certificates. A worker whose new CA trustd does not issue from yet keeps its own."""
        if not self.api_secure or self.config is None:
            return
        issuing = self._issuing_ca()
        if issuing is None:
            return
        key = self._api_key(issuing)
        if self._api_context is not None and self._api_context[0] == key:
            return
        # Made here, not in a thread: once the apply is answered, the machine must accept what it says.
        context = _api_context(issuing, self.address, *key[1:])
        self._api_context = (key, context)
        self.host.network.recredential(self.uuid, context)

    def _api_down(self, *, grace: float = GRACE) -> None:
        self.api_secure = False
        self.host.network.stop(self.uuid, grace=grace)

    def _issuing_ca(self) -> CertificateAndKey | None:
        """The CA this machine's API certificate comes from now: its own on a control plane, trustd's for a
        worker (once a control plane of its cluster runs), else None."""
        config, cluster = self.config, self.cluster
        if config is None or cluster is None:
            return None
        if config.os_ca.key:
            return config.os_ca
        if not cluster.trustd.is_set():
            return None
        return cluster.issuing_ca_for(config.os_ca.crt, config.token)

    # --- sequences ---

    def _count_boot(self) -> None:
        self.record.boots += 1
        self.record.boot_id = str(uuidlib.uuid4())
        self._persist()

    async def _boot(self) -> None:
        self._api_down()
        self._count_boot()
        if not self._firmware_boot():
            return
        self._set_stage(MachineStage.BOOTING)
        await self._sleep("boot")
        await self._join()
        record = self.record
        if record.staged_config is not None:
            record.config, record.staged_config = record.staged_config, None
            self._persist()
        self.config = self._parse_persisted()
        if self.config is None:
            await self._serve_maintenance()
            self._set_stage(MachineStage.MAINTENANCE)
            return
        await self._configured_boot()

    async def _join(self) -> None:
        """With ``--join``, as Talos with ``siderolink.api`` does at every boot: join herder (as the config
        the machine boots with says, if it says), again and again until it lets the machine in; from then on
        the machine's address is its tunnel address."""
        joiner = self.host.joiner
        if joiner is None:
            return
        while True:
            try:
                args = configured(self._booting_documents(), joiner.args)
                address = await joiner.up(self.uuid, self.record.talos_version, args)
                joiner.report(self.uuid, self.events, self.logs.kernel)
                break
            except (JoinFailed, JoinArgsError) as exc:
                self.last_error = f"siderolink: {exc}"
                self.logs.write("siderolink", f"join failed: {exc}")
                await asyncio.sleep(self.host.timings.join_retry)
        self.last_error = ""
        self.logs.write("siderolink", f"joined: tunnel address {address}")
        if address != self.record.address:
            self.record.address = address
            self._persist()
            if self._resources is not None:
                self._resources.close()
                self._resources = None
            self._api_context = None

    async def _leave(self) -> None:
        """The machine is off: its side of the tunnel is gone."""
        if self.host.joiner is not None:
            await self.host.joiner.down(self.uuid)

    def _firmware_boot(self) -> bool:
        """The firmware's pick at power-on: a Talos image on a medium runs that version and schematic;
        nothing bootable leaves the machine on with no system (and no Talos API). Whether it boots."""
        if self.firmware is None:
            return True
        boot = self.firmware.power_on(installed=self.record.installed)
        if boot is None:
            self.last_error = "no bootable device: nothing installed on the disk and no boot medium"
            self._set_stage(MachineStage.UNKNOWN)
            return False
        if not boot.from_disk:
            self.record.talos_version, self.record.schematic = boot.talos_version, boot.schematic
            self._persist()
            if self._resources is not None:
                self._resources.refresh()  # its extensions are the booted image's
        self.last_error = ""
        return True

    def _booting_documents(self) -> list[Any]:
        """The documents of the config this boot comes up with: none in maintenance, or when it does not
        validate (the machine stays in maintenance then)."""
        raw = self.record.staged_config or self.record.config
        if raw is None:
            return []
        try:
            return parse_config(raw, self.record.talos_version).documents()
        except ConfigError:
            return []

    def _parse_persisted(self) -> MachineConfig | None:
        if self.record.config is None:
            return None
        try:
            return parse_config(self.record.config, self.record.talos_version)
        except ConfigError as e:
            # A stored config that no longer validates (e.g. after a downgrade): Talos stays in maintenance.
            self.events.publish(pb.ConfigValidationErrorEvent(error=str(e)))
            return None

    async def _configured_boot(self) -> None:
        assert self.config is not None
        self._register_with_cluster()
        issuing = self._issuing_ca()
        if issuing is not None:
            await self._serve_secure(issuing)
        else:
            self._api_down()
        if not self.record.installed:
            self._set_stage(MachineStage.INSTALLING)
            await self._sleep("install")
            if "fail-install" in self.faults:
                self.record.config = None
                self._persist()
                self.config = None
                await self._serve_maintenance()
                self._set_stage(MachineStage.MAINTENANCE)
                raise SequenceFailed(
                    "install failed: error writing the system disk (injected fault); back in maintenance"
                )
            self.record.installed = True
            self._persist()
            await self._reboot_steps()
        await self._come_up()

    async def _reboot_steps(self) -> None:
        self._set_stage(MachineStage.REBOOTING)
        self._api_down()
        await self._leave()
        await self._sleep("reboot")
        self._count_boot()
        self._set_stage(MachineStage.BOOTING)
        await self._sleep("boot")
        await self._join()

    async def _come_up(self) -> None:
        config, cluster = self.config, self.cluster
        assert config is not None and cluster is not None
        issuing = self._issuing_ca()
        if issuing is None:
            self._set_stage(
                MachineStage.BOOTING, unmet=(("services", "apid: waiting for certificate from trustd"),)
            )
            while issuing is None:
                await cluster.trustd.wait()
                issuing = self._issuing_ca()
                if issuing is None:
                    # trustd refused (another CA or token): Talos keeps retrying; so does the emulator.
                    await asyncio.sleep(1.0)
        if not self.api_secure:
            await self._serve_secure(issuing)
        self._set_stage(MachineStage.RUNNING, ready=True)
        self._log_services_up(config)
        if config.is_control_plane:
            cluster.trustd.set()
            if cluster.bootstrapped and cluster.member_of(self.uuid) is None:
                member = cluster.join(self.uuid, self.hostname, self.address)
                self.host.store.save_cluster(cluster)
                if member is not None:
                    self.logs.write(
                        "etcd", f"joined the etcd cluster as member {member.id:x} ({self.hostname})"
                    )

    def _log_services_up(self, config: MachineConfig) -> None:
        """What the services say as they come up on a configured machine."""
        logs = self.logs
        services = ["containerd", "cri", "kubelet"] + (["etcd", "trustd"] if config.is_control_plane else [])
        for name in services:
            logs.write(
                "machined", f"service[{name}](Running): Started task {name} (PID {_pid(self.uuid, name)})"
            )
        logs.write("containerd", "containerd successfully booted")
        logs.write("cri", "serving CRI on /run/containerd/containerd.sock")
        if config.is_control_plane:
            logs.write(
                "trustd", "trustd listening on :50001: issuing API certificates to the cluster's workers"
            )
        logs.write("kubelet", f'"Attempting to register node" node="{self.hostname}"')
        logs.write("kubelet", f'"Successfully registered node" node="{self.hostname}"')

    def _register_with_cluster(self) -> None:
        config, cluster = self.config, self.cluster
        assert config is not None and cluster is not None
        if config.is_control_plane:
            cluster.learn_control_plane(config.cluster_name, config.os_ca, config.token)
            self.host.store.save_cluster(cluster)

    # --- power and faults (the control API, not the machine API) ---

    async def power_off(self) -> None:
        await self._cancel_sequence()
        self._cancel_try()
        self._api_down(grace=0)
        await self._leave()
        self.record.powered_on = False
        self._persist()
        self._set_stage(MachineStage.UNKNOWN)

    def power_on(self) -> None:
        if self.record.powered_on and self._busy():
            return
        if self.record.powered_on and self.stage is not MachineStage.UNKNOWN:
            return
        self.record.powered_on = True
        self._persist()
        self._run("boot", self._boot, takeover=True)

    async def inject(self, fault: str) -> None:
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}: expected one of {', '.join(FAULTS)}")
        if fault == "crash":
            await self.crash()
        elif fault == "heal":
            self.faults.clear()
            self.host.network.partition(self.uuid, False)
            self.host.machine_changed(self)
        else:
            self.faults.add(fault)
            if fault == "partition":
                self.host.network.partition(self.uuid, True)
                # Its etcd member and kubelet drop out too.
                self.host.machine_changed(self)

    async def crash(self) -> None:
        """The machine dies and comes back: only what it had persisted survives."""
        await self._cancel_sequence()
        self._cancel_try()
        self._api_down(grace=0)
        self.events.clear()
        if self._resources is not None:
            # machined's resources are in memory: they start over, and watches of them end.
            self._resources.close()
            self._resources = None
        self.recover_snapshot = None
        self._api_context = None
        self.record = self.host.store.load_machine(self.uuid) or self.record
        self.config = None
        self._set_stage(MachineStage.UNKNOWN)
        if self.record.powered_on:
            self._run("boot", self._boot, takeover=True)

    def _cancel_try(self) -> None:
        if self._try_revert is not None:
            self._try_revert.cancel()
            self._try_revert = None

    # --- services ---

    def service_names(self) -> list[str]:
        """The services machined runs on this machine (more once it has a config; etcd and trustd on a
        control plane)."""
        names = ["apid", "machined", "udevd"]
        if self.config is not None:
            names += ["containerd", "cri", "kubelet"]
            if self.config.is_control_plane:
                names += ["etcd", "trustd"]
        return sorted(names)

    def service_states(self) -> list[ServiceState]:
        running = self.stage is MachineStage.RUNNING
        states = []
        for name in self.service_names():
            healthy = running or name in ("apid", "machined", "udevd")
            if name == "etcd":
                cluster = self.cluster
                healthy = running and cluster is not None and cluster.member_healthy(self.uuid)
            state = "Running" if healthy else "Preparing"
            message = (
                "" if healthy else ("waiting for etcd bootstrap" if name == "etcd" else "waiting for boot")
            )
            if name in self.stopped_services:
                healthy, state, message = False, "Finished", "Service finished successfully"
            states.append(ServiceState(name, state, healthy, message))
        return states

    # --- what the machine API starts (``api`` checks the request and answers) ---

    @property
    def busy(self) -> bool:
        """Whether a sequence (boot, install, reboot, upgrade…) is running."""
        return self._busy()

    def require_running(self) -> MachineConfig:
        if self.config is None or self.stage is not MachineStage.RUNNING:
            raise precondition("the machine is not running")
        return self.config

    def reject_config(self, error: ConfigError) -> None:
        """A config that does not validate was offered: machined says so in its events."""
        self.events.publish(pb.ConfigValidationErrorEvent(error=str(error)))

    def install(self, new: MachineConfig) -> None:
        """Take a config in maintenance mode: persist it and install (the install sequence starts)."""
        self.record.config, self.record.staged_config = new.raw, None
        self.record.config_applies += 1
        self._persist()
        self.config = new
        self.logs.write(
            "machined", f"apply config request: {new.machine_type} config taken in maintenance mode"
        )
        self._run("install", self._configured_boot)

    def apply(self, new: MachineConfig, mode: ApplyMode, *, try_timeout: float) -> None:
        """Take a config on a configured machine in a mode already decided (not AUTO): tried for
        ``try_timeout`` seconds, staged for the next boot, or persisted, with a reboot in REBOOT mode."""
        self.logs.write("machined", f"apply config request: mode {mode.name.lower().replace('_', '-')}")
        self._cancel_try()
        self.record.config_applies += 1
        self._persist()
        if mode is ApplyMode.TRY:
            self._try_revert = asyncio.get_running_loop().call_later(try_timeout, self._revert_try)
            self.config = new
        elif mode is ApplyMode.STAGED:
            self.record.staged_config = new.raw
            self._persist()
        else:
            self.record.config, self.record.staged_config = new.raw, None
            self._persist()
            self.config = new
            self._register_with_cluster()
            if mode is ApplyMode.REBOOT:
                self._run("reboot", self._reboot_body, takeover=True)
        if mode is not ApplyMode.STAGED and mode is not ApplyMode.REBOOT:
            self._refresh_api()
        # Its kubelet and static pods follow a config applied without a reboot at once.
        self.refresh_resources()
        self.host.machine_changed(self)

    def _revert_try(self) -> None:
        self._try_revert = None
        self.config = self._parse_persisted()
        self._refresh_api()
        self.refresh_resources()
        self.events.publish(pb.TaskEvent(task="rollbackConfig", action=pb.TaskEvent.STOP))

    def reboot(self) -> str:
        """Start the reboot sequence; its actor id is returned."""
        self.require_running()
        actor = str(uuidlib.uuid4())
        self._run("reboot", self._reboot_body, actor_id=actor)
        return actor

    async def _reboot_body(self) -> None:
        await self._reboot_steps()
        self.config = self._adopt_staged_or_persisted()
        if self.config is None:
            await self._serve_maintenance()
            self._set_stage(MachineStage.MAINTENANCE)
            return
        self._api_down()
        await self._come_up()

    def _adopt_staged_or_persisted(self) -> MachineConfig | None:
        self._cancel_try()
        if self.record.staged_config is not None:
            self.record.config, self.record.staged_config = self.record.staged_config, None
            self._persist()
        return self._parse_persisted()

    def upgrade(self, target: str, *, stage: bool) -> str:
        """Start the upgrade sequence to Talos ``target`` (``vX.Y.Z``); its actor id is returned."""
        self.require_running()
        actor = str(uuidlib.uuid4())

        async def body() -> None:
            if stage:
                # A staged upgrade runs early in the next boot, before the system starts: reboot first.
                await self._reboot_steps()
            previous = self.record.talos_version
            self._set_stage(MachineStage.UPGRADING)
            await self._sleep("upgrade")
            # The target's installer checks in preflight that it may be installed over this version.
            verdict = check_talos_upgrade(previous, target)
            if not verdict:
                self._set_stage(MachineStage.RUNNING, ready=True)
                raise SequenceFailed(f"upgrade to {target} failed: {verdict.reason}")
            self.record.talos_version = target
            await self._reboot_steps()
            if "fail-upgrade" in self.faults:
                # The new system does not come up: the bootloader falls back to the previous one (A/B).
                self.record.talos_version = previous
                await self._reboot_steps()
                self._api_down()
                await self._come_up()
                raise SequenceFailed(
                    f"upgrade to {target} failed: the new system did not boot; rolled back to {previous}"
                )
            self._persist()
            self.config = self._adopt_staged_or_persisted()
            self._api_down()
            await self._come_up()

        self._run("upgrade", body, actor_id=actor)
        return actor

    def reset(self, *, graceful: bool, reboot: bool, wipe_state: bool) -> str:
        """Start the reset sequence (leaving etcd first when ``graceful``; wiping the config with
        ``wipe_state``); its actor id is returned."""
        config = self.require_running()
        actor = str(uuidlib.uuid4())

        async def body() -> None:
            cluster = self.cluster
            if graceful and config.is_control_plane and cluster is not None:
                member = cluster.member_of(self.uuid)
                if member is not None:
                    try:
                        cluster.remove(member.id)
                    except ApiError as e:
                        # etcd refused (no quorum, or the last members): the machine stays as it was.
                        raise SequenceFailed(f"failed to leave etcd: {e.message}") from None
                    self.host.store.save_cluster(cluster)
            self._set_stage(MachineStage.RESETTING)
            await self._sleep("reset")
            self._cancel_try()
            if not wipe_state:
                # Only other partitions (e.g. EPHEMERAL) are wiped: the config on STATE survives.
                if reboot:
                    await self._reboot_body()
                else:
                    await self._power_down()
                return
            record = self.record
            record.config = record.staged_config = None
            record.installed = False
            self._persist()
            self.config = None
            self.recover_snapshot = None
            if reboot:
                await self._reboot_steps()
                await self._serve_maintenance()
                self._set_stage(MachineStage.MAINTENANCE)
            else:
                await self._power_down()

        self._run("reset", body, actor_id=actor)
        return actor

    def shutdown(self) -> str:
        """Start the shutdown sequence; its actor id is returned."""
        if self.stage not in (MachineStage.RUNNING, MachineStage.MAINTENANCE, MachineStage.BOOTING):
            raise precondition(f"locked: the machine is {self.stage.name.lower()}")
        actor = str(uuidlib.uuid4())

        async def body() -> None:
            self._set_stage(MachineStage.SHUTTING_DOWN)
            await self._sleep("shutdown")
            await self._power_down()

        self._run("shutdown", body, actor_id=actor)
        return actor

    async def _power_down(self) -> None:
        self._cancel_try()
        self._api_down(grace=0)
        await self._leave()
        self.record.powered_on = False
        self._persist()
        self._set_stage(MachineStage.UNKNOWN)


def _pid(uuid: str, service: str) -> int:
    """A process id of the service, the same on every boot of the machine."""
    return 400 + int(hashlib.sha256((uuid + service).encode()).hexdigest()[:4], 16) % 3000


def _maintenance_context(address: str, hostname: str) -> ssl.SSLContext:
    cert = certs.maintenance_certificate(address, hostname)
    return machine_tls.server_context(cert.crt, cert.key, client_ca=None)


def _api_context(
    issuing_ca: CertificateAndKey, address: str, hostname: str, sans: tuple[str, ...], client_ca: bytes
) -> ssl.SSLContext:
    cert = certs.api_certificate(issuing_ca, address, hostname, sans)
    return machine_tls.server_context(cert.crt, cert.key, client_ca=client_ca)
