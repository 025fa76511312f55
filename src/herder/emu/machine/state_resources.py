"""The resources machined derives from a machine's state, as ``talosctl get`` and ``talosctl dashboard`` read
them: its services, the members and identity of its cluster, its config's type, its Talos version, its
network (status, resolvers, time servers, routes, links), its static pods and its kubelet.

Each collection is made when first read and refreshed when the machine changes (``resources.ResourceState``
``derive``), so a machine nobody looks at costs nothing.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Mapping
from datetime import UTC, datetime

from herder.emu.machine.kube_config import kube_facts
from herder.emu.machine.lifecycle import Machine
from herder.emu.machine.resources import ResourceState, extension_resources
from herder.talos.machine import resources as res
from herder.talos.machine.resources import Spec

_TIME_SERVERS = ("time.cloudflare.com",)
_APISERVER_PORT = 6443


def attach(machine: Machine, state: ResourceState) -> None:
    """Let the machine's resources derive what they hold from the machine."""
    producers = {
        (res.RUNTIME, res.SERVICE): lambda: services(machine),
        (res.CLUSTER, res.MEMBER): lambda: members(machine),
        (res.CLUSTER, res.CLUSTER_INFO): lambda: cluster_info(machine),
        (res.CONFIG, res.MACHINE_TYPE): lambda: {
            res.MACHINE_TYPE_ID: res.MachineTypeSpec(machine_type=_type(machine))
        },
        (res.RUNTIME, res.VERSION): lambda: {
            res.VERSION_ID: res.VersionSpec(version=machine.record.talos_version, name="Talos")
        },
        # An Image Factory image's extensions: its "schematic" one, the machine's schematic ID its version.
        (res.RUNTIME, res.EXTENSION_STATUS): lambda: {
            id: spec for _, _, id, spec in extension_resources(machine.record.schematic)
        },
        (res.NETWORK, res.NETWORK_STATUS): lambda: network_status(machine),
        (res.NETWORK, res.RESOLVER_STATUS): lambda: {
            res.RESOLVER_STATUS_ID: res.ResolverStatusSpec(dns_servers=(_gateway(machine),))
        },
        (res.NETWORK, res.TIME_SERVER_STATUS): lambda: {
            res.TIME_SERVER_STATUS_ID: res.TimeServerStatusSpec(ntp_servers=_TIME_SERVERS)
        },
        (res.NETWORK, res.ROUTE_STATUS): lambda: routes(machine),
        (res.NETWORK, res.LINK_STATUS): lambda: links(machine),
        (res.K8S, res.STATIC_POD_STATUS): lambda: static_pods(machine),
        (res.K8S, res.KUBELET_SPEC): lambda: kubelet_spec(machine),
    }
    for (namespace, type), produce in producers.items():
        state.derive(namespace, type, produce)


def _type(machine: Machine) -> str:
    return machine.config.machine_type if machine.config is not None else "unknown"


def services(machine: Machine) -> Mapping[str, Spec]:
    return {
        s.name: res.ServiceSpec(running=s.running, healthy=s.healthy, unknown=False)
        for s in machine.service_states()
    }


def members(machine: Machine) -> Mapping[str, Spec]:
    """The machines of its cluster that run its config's cluster, as discovery finds them (itself too)."""
    config = machine.config
    if config is None:
        return {}
    out: dict[str, Spec] = {}
    for peer in machine.host.machines_of(config.cluster_id):
        if peer.config is None or (not peer.runs_in(config.cluster_id) and peer is not machine):
            continue
        node_id = hashlib.sha256(peer.uuid.encode()).hexdigest()[:43]
        out[peer.hostname] = res.MemberSpec(
            node_id=node_id,
            addresses=(peer.address,),
            hostname=peer.hostname,
            machine_type=peer.config.machine_type,
            operating_system=f"Talos ({peer.record.talos_version})",
            control_plane=res.ControlPlaneSpec(api_server_port=_APISERVER_PORT)
            if peer.config.is_control_plane
            else None,
        )
    return out


def cluster_info(machine: Machine) -> Mapping[str, Spec]:
    config = machine.config
    if config is None:
        return {}
    return {
        res.CLUSTER_INFO_ID: res.ClusterInfoSpec(
            cluster_id=config.cluster_id, cluster_name=config.cluster_name
        )
    }


def network_status(machine: Machine) -> Mapping[str, Spec]:
    up = machine.api_secure or machine.in_maintenance
    return {
        res.NETWORK_STATUS_ID: res.NetworkStatusSpec(
            address_ready=up, connectivity_ready=up, hostname_ready=up, etc_files_ready=up
        )
    }


def _gateway(machine: Machine) -> str:
    """The first address of the machine's /24: its default gateway and resolver."""
    network = ipaddress.ip_network(f"{machine.address}/24", strict=False)
    return str(network.network_address + 1)


def _mac(machine: Machine) -> str:
    digest = hashlib.sha256(machine.uuid.encode()).digest()
    return "52:54:00:" + ":".join(f"{b:02x}" for b in digest[:3])


def routes(machine: Machine) -> Mapping[str, Spec]:
    network = ipaddress.ip_network(f"{machine.address}/24", strict=False)
    gateway = _gateway(machine)
    return {
        f"inet4/{gateway}//254/1024": res.RouteStatusSpec(
            family="inet4", gateway=gateway, out_link_index=2, out_link_name="eth0", table="main",
            priority=1024, scope="global", type="unicast", protocol="static",
        ),
        f"inet4//{network}/254/1024": res.RouteStatusSpec(
            family="inet4", dst=str(network), src=machine.address, out_link_index=2, out_link_name="eth0",
            table="main", priority=1024, scope="link", type="unicast", protocol="kernel",
        ),
        "local/inet4//127.0.0.0/8/255/0": res.RouteStatusSpec(
            family="inet4", dst="127.0.0.0/8", src="127.0.0.1", out_link_index=1, out_link_name="lo",
            table="local", scope="host", type="local", protocol="kernel",
        ),
    }  # fmt: skip


def links(machine: Machine) -> Mapping[str, Spec]:
    mac = _mac(machine)
    return {
        "lo": res.LinkStatusSpec(
            index=1, type="loopback", flags="UP,LOOPBACK,RUNNING,LOWER_UP", hardware_addr="00:00:00:00:00:00",
            broadcast_addr="00:00:00:00:00:00", mtu=65536, queue_disc="noqueue", operational_state="unknown",
            link_state=True, port="Other", duplex="Unknown",
        ),
        "eth0": res.LinkStatusSpec(
            index=2, type="ether", flags="UP,BROADCAST,RUNNING,MULTICAST,LOWER_UP", hardware_addr=mac,
            permanent_addr=mac, broadcast_addr="ff:ff:ff:ff:ff:ff", mtu=1500, queue_disc="pfifo_fast",
            operational_state="up", driver="virtio_net", link_state=True, port="Other", duplex="Unknown",
        ),
    }  # fmt: skip


def static_pods(machine: Machine) -> Mapping[str, Spec]:
    """The control plane's static pods, running while the kubelet does."""
    config = machine.config
    if config is None or not config.is_control_plane or "kubelet" in machine.stopped_services:
        return {}
    running = machine.runs_in(config.cluster_id)
    started = datetime.fromtimestamp(machine.booted_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    facts = kube_facts(config)
    pods = ["kube-apiserver"]
    pods += ["kube-controller-manager"] if facts.controller_manager else []
    pods += ["kube-scheduler"] if facts.scheduler else []
    status = "True" if running else "False"
    return {
        f"kube-system/{pod}-{machine.hostname}": res.StaticPodStatusSpec(
            pod_status={
                "phase": "Running" if running else "Pending",
                "conditions": [
                    {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": started}
                    for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
                ],
                "hostIP": machine.address,
                "podIP": machine.address,
                "startTime": started,
                "qosClass": "Burstable",
            }
        )
        for pod in pods
    }


def kubelet_spec(machine: Machine) -> Mapping[str, Spec]:
    config = machine.config
    if config is None:
        return {}
    facts = kube_facts(config)
    return {
        res.KUBELET_SPEC_ID: res.KubeletSpecSpec(
            image=facts.kubelet_image,
            args=(
                "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubeconfig",
                "--config=/etc/kubernetes/kubelet.yaml",
                "--hostname-override=" + machine.hostname,
                "--kubeconfig=/etc/kubernetes/kubeconfig-kubelet",
                "--node-ip=" + machine.address,
            ),
            expected_nodename=machine.hostname,
            config={
                "apiVersion": "kubelet.config.k8s.io/v1beta1",
                "kind": "KubeletConfiguration",
                "clusterDomain": facts.dns_domain,
                "clusterDNS": [facts.service_ip(10)],
            },
        )
    }
