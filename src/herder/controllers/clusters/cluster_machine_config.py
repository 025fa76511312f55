"""Config generation: each ClusterMachine's Talos config, made with herder's Talos library from the
cluster's secrets and version contract, with ConfigPatches layered system → cluster → machine set →
cluster machine → machine, validated against the contract, and kept as its ClusterMachineConfig.

A patch that makes an invalid config, or touches what herder owns, stops at this machine: the reason is
on the ClusterMachine's ``ConfigValid`` condition and in a Warning event (the condition turns True once
a config is made again; a member that never had a fault has none), and the last good config stays in
place. The generated base config of a (cluster, role, version, disk) is reused across machines.
"""

from __future__ import annotations

import functools
import hashlib
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from herder.controllers.backups.restore import encryption_pending
from herder.controllers.cluster_keys import ClusterKeys, ClusterSecretsView
from herder.controllers.installer import member_installer
from herder.controllers.members import cluster_changes, cluster_of, labelled, machine_of
from herder.resources import Resource
from herder.resources.access import READ_ONLY_ANNOTATION, READERS_BINDING
from herder.resources.clusters import (
    CLUSTER,
    CLUSTER_MACHINE,
    CLUSTER_MACHINE_CONFIG,
    MACHINE_SET,
    MACHINE_SET_NODE,
    ClusterMachineConfigSpec,
    ClusterMachineSpec,
    ClusterMachineStatus,
    ClusterSpec,
    ClusterStatus,
    MachineSetNodeSpec,
)
from herder.resources.configuration import CONFIG_PATCH, ConfigPatchSpec
from herder.resources.join import SIDERO_LINK, SideroLinkSpec
from herder.resources.machines import (
    CLUSTER_LABEL,
    CLUSTER_MACHINE_LABEL,
    MACHINE,
    MACHINE_LABEL,
    MACHINE_SET_LABEL,
    Hardware,
    MachineStatus,
)
from herder.resources.provisioning import JOIN_CONFIG, MACHINE_REQUEST_LABEL, JoinConfigSpec
from herder.resources.status import status_of
from herder.runtime.controller import (
    Context,
    Controller,
    ObjectKey,
    Result,
    Watch,
    controller_owner,
    on_change,
    same_name,
)
from herder.runtime.index import LabelIndex
from herder.runtime.outputs import Owns, Writes
from herder.state.store import CONTROLLER_ANNOTATION, WatchEvent
from herder.talos.contracts import VersionContract
from herder.talos.generate import ConfigInput, GenerateError, MachineType, generate_documents
from herder.talos.patch_layers import LayeredPatch, PatchLayer, apply_layers
from herder.talos.patches import PatchError
from herder.talos.siderolink.kernel_args import JoinArgs, JoinArgsError
from herder.talos.siderolink.kernel_args import parse as parse_join_args
from herder.talos.siderolink.rejoin import Rejoin
from herder.talos.system_patches import disk_encryption as _disk_encryption
from herder.talos.system_patches import inline_manifest, siderolink
from herder.talos.validate import ConfigInvalid, validate_config

DEFAULT_DISK = "/dev/sda"
_CACHE = 512


@functools.cache
def _readers_binding(contract: VersionContract) -> str:
    """What lets a Reader's proxied requests read (group herder:readers → ClusterRole view)."""
    return inline_manifest(contract, "herder-readers", READERS_BINDING)


@dataclass(frozen=True)
class _BaseKey:
    cluster_uid: str
    generation: int
    secrets: str
    endpoint: str
    role: str
    install_image: str
    kubernetes_version: str
    disk: str


class ConfigError(Exception):
    """Why no valid config could be made for a machine (shown to the user as is)."""


class ClusterMachineConfigController(Controller):
    name = "ClusterMachineConfigController"
    primary = CLUSTER_MACHINE.kind
    outputs = (
        Owns(CLUSTER_MACHINE_CONFIG.kind),
        Writes(CLUSTER_MACHINE.kind, "status.conditions[ConfigValid]"),
    )
    concurrency = 4

    def __init__(self, keys: ClusterKeys, rejoin: Rejoin | None = None) -> None:
        self._keys = keys
        self._rejoin = rejoin
        """How a machine that joined with a JoinToken joins again (None: herder serves no SideroLink)."""
        self._members = LabelIndex(CLUSTER_MACHINE.kind, CLUSTER_LABEL)
        # The generated documents, patched without a YAML round trip (the same config, a fortieth of the work).
        self._bases: OrderedDict[_BaseKey, list[dict[str, Any]]] = OrderedDict()
        self._finals: OrderedDict[tuple[_BaseKey, tuple[tuple[int, str, str], ...]], str] = OrderedDict()
        self.watches = (
            Watch(
                CLUSTER_MACHINE.kind,
                on_change(self._members.track, "spec", "metadata.labels", "metadata.deletionTimestamp"),
            ),
            Watch(CLUSTER.kind, cluster_changes("endpoint", mapper=self._members.by_name())),
            Watch(MACHINE_SET.kind, self._set_changed),
            Watch("ClusterSecrets", self._members.by_name()),
            Watch(CONFIG_PATCH.kind, self._patch_targets),
            Watch(MACHINE.kind, on_change(self._disks_changed, "status.hardware")),
            Watch(MACHINE_SET_NODE.kind, on_change(same_name(CLUSTER_MACHINE.kind), "spec.installDisk")),
            # Only to make a config again that someone deleted.
            Watch(
                CLUSTER_MACHINE_CONFIG.kind, on_change(controller_owner(CLUSTER_MACHINE.kind), "metadata.uid")
            ),
        )

    def _patch_targets(self, event: WatchEvent) -> Iterable[ObjectKey]:
        labels = event.object.metadata.labels
        keys = set(self._members.by_label()(event))
        for label in (CLUSTER_MACHINE_LABEL, MACHINE_LABEL):
            if label in labels:
                keys.add(ObjectKey(CLUSTER_MACHINE.kind, event.object.namespace, labels[label]))
        return keys

    def _set_changed(self, event: WatchEvent) -> Iterable[ObjectKey]:
        # A set's system extensions are in its machines' installer image.
        if event.previous is not None and event.previous.spec == event.object.spec:
            return ()
        return self._members.by_label()(event)

    def _disks_changed(self, event: WatchEvent) -> Iterable[ObjectKey]:
        before = event.previous
        if before is not None and _disk_of(before) == _disk_of(event.object):
            return ()
        return same_name(CLUSTER_MACHINE.kind)(event)

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        member = await ctx.get(key)
        if member is None or member.metadata.deletion_timestamp:
            return None
        cluster = await cluster_of(ctx, member)
        if cluster is None or cluster.metadata.deletion_timestamp:
            return None
        secrets = await self._keys.of(cluster)
        endpoint = (
            CLUSTER.spec_of(cluster, ClusterSpec).endpoint or status_of(cluster, ClusterStatus).endpoint
        )
        if secrets is None or not endpoint:
            return None  # the cluster's secrets and endpoint come first; their events bring us back
        if await encryption_pending(ctx, cluster, secrets.restored_from):
            return None  # a restored cluster's secrets take the backup's encryption secrets first
        node = await ctx.get(ObjectKey(MACHINE_SET_NODE.kind, key.namespace, key.name))
        disk = MACHINE_SET_NODE.spec_of(node, MachineSetNodeSpec).install_disk if node else ""
        try:
            config = await self._config(
                ctx, cluster, member, secrets, endpoint, disk or _disk_of(await machine_of(ctx, member))
            )
        except ConfigError as exc:
            # Told once; a different fault of the same kind shows on the condition.
            await ctx.condition(member, "ConfigValid", False, "InvalidConfig", str(exc), event="Warning")
            return None
        digest = hashlib.sha256(config.encode()).hexdigest()
        wanted = CLUSTER_MACHINE.spec_of(member, ClusterMachineSpec)
        current = await ctx.get(ObjectKey(CLUSTER_MACHINE_CONFIG.kind, key.namespace, key.name))
        if (
            current is None
            or CLUSTER_MACHINE_CONFIG.spec_of(current, ClusterMachineConfigSpec).hash != digest
        ):
            await ctx.apply_output(
                member,
                Resource.model_validate(
                    {
                        "apiVersion": CLUSTER_MACHINE_CONFIG.api_version,
                        "kind": CLUSTER_MACHINE_CONFIG.kind,
                        "metadata": {"name": member.name, "namespace": member.namespace},
                        "spec": {
                            "config": config,
                            "hash": digest,
                            "talosContract": secrets.contract,
                            "talosVersion": wanted.talos_version,
                            "kubernetesVersion": wanted.kubernetes_version,
                        },
                    }
                ),
            )
        if status_of(member, ClusterMachineStatus).condition("ConfigValid") is not None:
            # A fault mended. A config made without one says nothing the ClusterMachineConfig does not:
            # no condition, rather than a write of every new member for it.
            await ctx.condition(member, "ConfigValid", True, "Generated")
        return None

    async def _config(
        self,
        ctx: Context,
        cluster: Resource,
        member: Resource,
        secrets: ClusterSecretsView,
        endpoint: str,
        disk: str,
    ) -> str:
        spec = CLUSTER.spec_of(cluster, ClusterSpec)
        wanted = CLUSTER_MACHINE.spec_of(member, ClusterMachineSpec)
        contract = VersionContract.parse(secrets.contract)
        install_image = await member_installer(ctx, member, wanted.talos_version)
        base_key = _BaseKey(
            cluster.metadata.uid or "",
            cluster.metadata.generation or 0,
            secrets.revision,
            endpoint,
            wanted.role,
            install_image,
            wanted.kubernetes_version,
            disk,
        )
        base = self._bases.get(base_key)
        if base is None:
            try:
                base = generate_documents(
                    ConfigInput(
                        cluster_name=cluster.name,
                        endpoint=endpoint,
                        kubernetes_version=wanted.kubernetes_version,
                        contract=contract,
                        secrets=secrets.bundle,
                        install_disk=disk,
                        install_image=install_image,
                        kubespan=True if spec.features.kube_span else None,
                        accepted_talos_cas=secrets.accepted_talos,
                        accepted_kubernetes_cas=secrets.accepted_kubernetes,
                    ),
                    MachineType(wanted.role),
                )
            except GenerateError as exc:
                raise ConfigError(f"cannot generate a config: {exc}") from None
            self._bases[base_key] = base
            if len(self._bases) > _CACHE:
                self._bases.popitem(last=False)
        layers = await self._patches(ctx, cluster, member)
        layers += system_layers(
            contract,
            wanted.role,
            disk_encryption=spec.features.disk_encryption,
            joined=await _siderolink_patch(ctx, member, self._rejoin),
        )
        # Machines of one role usually share every patch: their config is made and validated once.
        final_key = (base_key, tuple(sorted((p.layer, p.name, p.text) for p in layers)))
        known = self._finals.get(final_key)
        if known is not None:
            return known
        try:
            config = apply_layers(base, layers)
            validate_config(config, contract)
        except (PatchError, ConfigInvalid) as exc:
            raise ConfigError(str(exc)) from None
        self._finals[final_key] = config
        if len(self._finals) > _CACHE:
            self._finals.popitem(last=False)
        return config

    async def _patches(self, ctx: Context, cluster: Resource, member: Resource) -> list[LayeredPatch]:
        """The ConfigPatches targeting this machine, each in its layer."""
        namespace = member.namespace
        of_cluster = await labelled(ctx, CONFIG_PATCH.kind, namespace, CLUSTER_LABEL, cluster.name)
        of_machine = await labelled(ctx, CONFIG_PATCH.kind, namespace, MACHINE_LABEL, member.name)
        machine_set = member.metadata.labels.get(MACHINE_SET_LABEL)
        # A read-only machine is the platform's: users' patches (cluster-wide ones included) stay off it;
        # herder's own and its provider's apply.
        platform_only = READ_ONLY_ANNOTATION in member.metadata.annotations
        out: dict[str, LayeredPatch] = {}
        for patch in (*of_cluster, *of_machine):
            if patch.metadata.deletion_timestamp:
                continue
            if platform_only and not _platform_patch(patch):
                continue
            layer = _layer(patch, machine_set, member.name)
            if layer is not None:
                text = CONFIG_PATCH.spec_of(patch, ConfigPatchSpec).data
                out[patch.name] = LayeredPatch(layer, patch.name, text)
        return list(out.values())


def system_layers(
    contract: VersionContract, role: str, *, disk_encryption: bool = False, joined: str = ""
) -> list[LayeredPatch]:
    """herder's own patches of a machine's config: disk encryption, the Readers' binding on control planes,
    a joined machine's SideroLink settings (``joined``)."""
    layers = []
    if disk_encryption:
        layers.append(LayeredPatch(PatchLayer.SYSTEM, "000-disk-encryption", _disk_encryption(contract)))
    if role == "controlplane":
        layers.append(LayeredPatch(PatchLayer.SYSTEM, "000-readers", _readers_binding(contract)))
    if joined:
        layers.append(LayeredPatch(PatchLayer.SYSTEM, "000-siderolink", joined))
    return layers


def default_disk(hardware: Hardware | None) -> str:
    """The install disk when a MachineSetNode names none: the machine's first disk, as Talos's installer
    would pick."""
    for disk in hardware.disks if hardware is not None else ():
        if disk.name:
            return disk.name if disk.name.startswith("/dev/") else f"/dev/{disk.name}"
    return DEFAULT_DISK


async def _siderolink_patch(ctx: Context, member: Resource, rejoin: Rejoin | None) -> str:
    """The SideroLink settings of a machine that joined ('' for any other): with its provider's token, or,
    having joined with a JoinToken (of which herder keeps only the digest), with its own rejoin token."""
    args = await _join_args(ctx, member, rejoin)
    return siderolink(args.api_url, args.events_sink, args.kernel_log) if args is not None else ""


async def _join_args(ctx: Context, member: Resource, rejoin: Rejoin | None) -> JoinArgs | None:
    link = await ctx.get(ObjectKey(SIDERO_LINK.kind, member.namespace, member.name))
    if link is None:
        return None
    by = SIDERO_LINK.spec_of(link, SideroLinkSpec).join_token
    if not by.startswith("provider/"):
        return rejoin.args_for(member.name) if rejoin is not None else None
    join = await ctx.get(ObjectKey(JOIN_CONFIG.kind, None, by.removeprefix("provider/")))
    if join is None:
        return None
    try:
        return parse_join_args(JOIN_CONFIG.spec_of(join, JoinConfigSpec).kernel_args)
    except JoinArgsError:
        return None


def _platform_patch(patch: Resource) -> bool:
    """A patch of herder's (a controller's output) or of an infra provider for its request's machine."""
    return (
        CONTROLLER_ANNOTATION in patch.metadata.annotations or MACHINE_REQUEST_LABEL in patch.metadata.labels
    )


def _layer(patch: Resource, machine_set: str | None, uuid: str) -> PatchLayer | None:
    """Which layer a patch is in for this machine, or None when it targets other machines."""
    labels = patch.metadata.labels
    if CONTROLLER_ANNOTATION in patch.metadata.annotations:
        targeted = labels.get(CLUSTER_MACHINE_LABEL, labels.get(MACHINE_LABEL, uuid)) == uuid
        in_set = labels.get(MACHINE_SET_LABEL, machine_set) == machine_set
        return PatchLayer.SYSTEM if targeted and in_set else None
    if MACHINE_LABEL in labels:
        return PatchLayer.MACHINE if labels[MACHINE_LABEL] == uuid else None
    if CLUSTER_MACHINE_LABEL in labels:
        return PatchLayer.CLUSTER_MACHINE if labels[CLUSTER_MACHINE_LABEL] == uuid else None
    if MACHINE_SET_LABEL in labels:
        return PatchLayer.MACHINE_SET if labels[MACHINE_SET_LABEL] == machine_set else None
    return PatchLayer.CLUSTER


def _disk_of(machine: Resource | None) -> str:
    return default_disk(status_of(machine, MachineStatus).hardware if machine is not None else None)
