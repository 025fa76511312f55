"""Managed control planes: for a Cluster with ``spec.controlPlane.managed``, herder creates and owns

- the hidden MachineRequestSet ``herder-<cluster>-control-planes``: the size's machine count from the
  offering's provider, with the size's provider data and the cluster's Talos version and extensions
  (its machines are read-only: ``machine_requests`` marks the machines of hidden requests);
- the control plane MachineSet ``<cluster>-control-planes``, read-only, allocating only the machines of
  that request set (``spec.machineRequestSet``); its nodes and cluster machines are read-only too;
- the hidden system ConfigPatches of managed mode: KubeSpan on every machine of the cluster, and on the
  control planes their components' metrics endpoints bound for scraping and, when the offering says so,
  no kubelet node registration.

The cluster's ``ManagedControlPlane`` condition says how far it got, in words that never name the hidden
provider. Growing the size grows the request set; the control plane set follows it.
"""

from __future__ import annotations

from typing import Any

from herder.controllers.managed.offerings import context_lookup, offered
from herder.controllers.members import cluster_changes
from herder.resources import KindInfo, Resource
from herder.resources.access import HIDDEN_LABEL, READ_ONLY_ANNOTATION
from herder.resources.clusters import (
    CLUSTER,
    MACHINE_SET,
    ClusterSpec,
    ClusterStatus,
    MachineSetStatus,
    control_plane_set_name,
)
from herder.resources.configuration import CONFIG_PATCH
from herder.resources.machines import CLUSTER_LABEL, MACHINE_SET_LABEL
from herder.resources.managed import (
    control_plane_request_set_name,
    offering_name,
    system_patch_name,
)
from herder.resources.provisioning import INFRA_PROVIDER, MACHINE_REQUEST_SET, ManagedControlPlanes
from herder.resources.status import status_of
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch, controller_owner
from herder.runtime.event_recorder import EventType
from herder.runtime.index import FieldIndex
from herder.runtime.outputs import Owns, Writes
from herder.talos.contracts import VersionContract
from herder.talos.system_patches import kube_span, managed_control_plane

CONDITION = "ManagedControlPlane"
# Its reasons, which its Events carry too.
READY = "ControlPlanesReady"
PROVISIONING = "ProvisioningControlPlanes"
# The reasons of a machine set's Ready condition while it gets its machines (of the platform's set, all
# the platform provisioning them) and while they come up.
_COMING_UP = ("ScalingUp", "MachinesMissing", "MachinesNotReady")
# The system patches, by what they are about (``herder-<cluster>-<what>``).
KUBESPAN = "kubespan"
CONTROL_PLANES = "control-planes"
_PATCHES = (KUBESPAN, CONTROL_PLANES)
_RETRY = 10.0


class ManagedControlPlaneController(Controller):
    name = "ManagedControlPlane"
    primary = CLUSTER.kind
    outputs = (
        Writes(CLUSTER.kind, f"status.conditions[{CONDITION}]"),
        Owns(MACHINE_REQUEST_SET.kind),
        Owns(MACHINE_SET.kind),
        Owns(CONFIG_PATCH.kind),
    )
    concurrency = 4

    def __init__(self) -> None:
        # The managed clusters of each offering, wherever they are, so that a change of the offer reaches them.
        self._users = FieldIndex(CLUSTER.kind, _offering_of, namespaced=False)
        owner = controller_owner(CLUSTER.kind)
        self.watches = (
            Watch(CLUSTER.kind, cluster_changes("initialTalosVersion", mapper=self._users.track)),
            Watch(MACHINE_REQUEST_SET.kind, owner),
            Watch(MACHINE_SET.kind, owner),
            Watch(CONFIG_PATCH.kind, owner),
            Watch(
                INFRA_PROVIDER.kind, lambda event: self._users.keys(None, offering_name(event.object.name))
            ),
        )

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        cluster = await ctx.get(key)
        if cluster is None:
            return None  # what it owned is garbage-collected after it
        if cluster.metadata.deletion_timestamp:
            await self._tear_down(ctx, cluster)
            return None
        spec = CLUSTER.spec_of(cluster, ClusterSpec)
        managed = spec.managed
        if managed is None:
            return None
        found = await offered(context_lookup(ctx), managed.provider)
        size = found[1].sizes.get(managed.size) if found is not None else None
        if found is None or size is None:
            what = "size " + managed.size if found is not None else "offering " + managed.provider
            await _condition(
                ctx, cluster, False, "NotOffered", f"managed control planes: {what} is no longer offered"
            )
            return Result(requeue_after=_RETRY)
        provider, offer = found
        name = control_plane_request_set_name(cluster.name)
        request_set = self._output(
            MACHINE_REQUEST_SET,
            name,
            cluster,
            {CLUSTER_LABEL: cluster.name, HIDDEN_LABEL: "true"},
            {
                "providerID": provider.name,
                "machineCount": size.machines,
                "talosVersion": spec.talos_version,
                "providerData": size.provider_data,
                "schematic": {"extensions": spec.system_extensions},
            },
        )
        control_planes = control_plane_set_name(cluster.name)
        machine_set = self._output(
            MACHINE_SET,
            control_planes,
            cluster,
            {CLUSTER_LABEL: cluster.name},
            {"role": "controlplane", "machineRequestSet": name},
            annotations={READ_ONLY_ANNOTATION: "true"},
        )
        for desired in (request_set, machine_set, *self._patches(cluster, spec, offer)):
            await _apply(ctx, cluster, desired)
        current = await ctx.get(ObjectKey(MACHINE_SET.kind, key.namespace, control_planes))
        shown = status_of(current, MachineSetStatus) if current is not None else None
        ready = shown.condition("Ready") if shown is not None else None
        if ready is not None and ready.status == "True":
            await _condition(ctx, cluster, True, READY, f"{size.machines} managed control plane(s) ready")
        else:
            # Getting the machines and their coming up are one message: each machine's progress is the
            # Cluster's ControlPlaneReady condition's to tell, and repeated here (even as a count) it cost
            # another write of the Cluster for every step of every control plane.
            why = "control plane machines are being provisioned; ControlPlaneReady says how far"
            if ready is not None and ready.reason not in _COMING_UP and ready.message:
                why = ready.message
            await _condition(ctx, cluster, False, PROVISIONING, f"size {managed.size}: {why}")
        return None

    async def _tear_down(self, ctx: Context, cluster: Resource) -> None:
        """A cluster being deleted loses its control plane set (its machines leave, reset, as every
        cluster's do) and its system patches; the request set stays until the cluster is gone (then it is
        garbage-collected, and its machines destroyed), so that its machines can be reset first."""
        names = [
            (MACHINE_SET.kind, control_plane_set_name(cluster.name)),
            *((CONFIG_PATCH.kind, system_patch_name(cluster.name, what)) for what in _PATCHES),
        ]
        for kind, name in names:
            current = await ctx.get(ObjectKey(kind, cluster.namespace, name))
            if current is not None and ctx.own(current) and not current.metadata.deletion_timestamp:
                await ctx.delete(ObjectKey.of(current))

    def _patches(self, cluster: Resource, spec: ClusterSpec, offer: ManagedControlPlanes) -> list[Resource]:
        # Configs keep the format of the version the cluster was created with (see cluster_machine_config).
        contract = VersionContract.parse(
            status_of(cluster, ClusterStatus).initial_talos_version or spec.talos_version
        )
        hidden = {CLUSTER_LABEL: cluster.name, HIDDEN_LABEL: "true"}
        control_planes = {**hidden, MACHINE_SET_LABEL: control_plane_set_name(cluster.name)}
        patches = (
            (KUBESPAN, hidden, kube_span(contract), "KubeSpan on every machine (managed control planes)"),
            (
                CONTROL_PLANES,
                control_planes,
                managed_control_plane(contract, register_nodes=offer.register_nodes),
                "managed control planes: metrics endpoints for scraping"
                + ("" if offer.register_nodes else "; no kubelet node registration"),
            ),
        )
        return [
            self._output(
                CONFIG_PATCH,
                system_patch_name(cluster.name, what),
                cluster,
                labels,
                {"data": data, "description": description},
            )
            for what, labels, data, description in patches
        ]

    @staticmethod
    def _output(
        kind: KindInfo,
        name: str,
        cluster: Resource,
        labels: dict[str, str],
        spec: dict[str, Any],
        annotations: dict[str, str] | None = None,
    ) -> Resource:
        """The output as the store will hold it (normalized, labelled by its kind), to compare with."""
        return kind.validate(
            Resource.model_validate(
                {
                    "apiVersion": kind.api_version,
                    "kind": kind.kind,
                    "metadata": {
                        "name": name,
                        "namespace": cluster.namespace,
                        "labels": labels,
                        "annotations": annotations or {},
                    },
                    "spec": spec,
                }
            )
        )


def _offering_of(cluster: Resource) -> str | None:
    """The offering a managed cluster's control planes come from (None for any other cluster)."""
    managed = CLUSTER.spec_of(cluster, ClusterSpec).managed
    return managed.provider if managed is not None else None


async def _condition(ctx: Context, cluster: Resource, ok: bool, reason: str, message: str) -> None:
    # Getting its machines is no fault: only a control plane no longer offered is a Warning. Its control
    # planes ready is no Event of its own: the cluster's ControlPlaneReady tells it at the same moment.
    warn = not ok and reason != PROVISIONING
    event: EventType | None = None if ok else "Warning" if warn else "Normal"
    await ctx.condition(cluster, CONDITION, ok, reason, message, event=event)


async def _apply(ctx: Context, cluster: Resource, desired: Resource) -> None:
    """Create or update an output, unless it already is as desired (no write, no event)."""
    current = await ctx.get(ObjectKey.of(desired))
    if (
        current is not None
        and current.spec == desired.spec
        and all(current.metadata.labels.get(k) == v for k, v in desired.metadata.labels.items())
        and all(current.metadata.annotations.get(k) == v for k, v in desired.metadata.annotations.items())
        and (ref := current.metadata.controller_ref()) is not None
        and ref.uid == cluster.metadata.uid
    ):
        return
    await ctx.apply_output(cluster, desired)
