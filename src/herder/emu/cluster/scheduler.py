"""The emulated scheduler and what the kubelets make of the pods anyone else creates (the emulated components'
own pods are placed by ``sync``): each is placed on a Ready node it may run on (schedulable, tolerated taints,
matching nodeSelector, the least loaded first) and run there; a pod whose node stopped answering is not
ready any more; one that fits nowhere stays Pending. No controllers run for other workloads: a Deployment of
one's own gets no pods.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

from herder.emu.cluster.kube_facts import KubeFacts
from herder.emu.cluster.manifests import (
    internal_ip,
    is_component_pod,
    not_ready,
    pod_address,
    pod_is_ready,
    running_status,
    strip_times,
)
from herder.resources import Resource
from herder.resources.kubernetes import POD
from herder.state.errors import StateError
from herder.state.store import Store


async def watch(store: Store, resync: Callable[[], None]) -> None:
    """The scheduler's watch: a pod of someone else's (not the emulated components') needs a sync."""
    while True:
        try:
            async for event in store.watch(POD):
                if event.type in ("ADDED", "MODIFIED") and not is_component_pod(event.object):
                    resync()
        except StateError:
            # Fell behind the retained history: look at every pod once, then watch again.
            resync()
            await asyncio.sleep(0.1)


def others_pods(
    pods: list[Resource], ready_nodes: list[Resource], facts: KubeFacts | None
) -> Iterator[dict[str, Any]]:
    """The pods of ``pods`` that are not the components' own, each as it is to be written, where that changes
    it: placed and running, not ready any more, or Pending."""
    ready = {n.name: n for n in ready_nodes}
    load: dict[str, int] = dict.fromkeys(ready, 0)
    others = []
    for pod in pods:
        node_name = (pod.spec or {}).get("nodeName")
        if node_name in load:
            load[node_name] += 1
        # A pod whose containers ran to their end (a Job's) stays as its kubelet left it.
        ended = (pod.status or {}).get("phase") in ("Succeeded", "Failed")
        if not is_component_pod(pod) and not pod.metadata.deletion_timestamp and not ended:
            others.append(pod)
    for pod in others:
        data = pod.to_dict()
        node_name = data["spec"].get("nodeName")
        if node_name and node_name not in ready:
            if pod_is_ready(pod):
                yield not_ready(pod)
            continue
        node = ready.get(node_name) if node_name else place(data, list(ready.values()), load)
        if node is None:
            data["status"] = unschedulable_status(len(ready))
        else:
            load[node.name] = load.get(node.name, 0) + (0 if node_name else 1)
            data["spec"]["nodeName"] = node.name
            host_ip = internal_ip(node)
            if facts is None or data["spec"].get("hostNetwork"):
                pod_ip = host_ip
            else:
                pod_ip = pod_address(facts, pod.name)
            data["status"] = running_status(data["spec"]["containers"], host_ip, pod_ip)
        # Only a change is written: each write is seen by the watch that asks for this sync.
        placed = node is not None and not node_name
        if placed or strip_times(data["status"]) != strip_times(pod.status or {}):
            yield data


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    for toleration in tolerations:
        exists = toleration.get("operator") == "Exists"
        if toleration.get("key", "") not in ("", taint.get("key")) or (
            not toleration.get("key") and not exists
        ):
            continue
        if not exists and toleration.get("value", "") != taint.get("value", ""):
            continue
        if toleration.get("effect") in (None, "", taint.get("effect")):
            return True
    return False


def place(pod: dict[str, Any], nodes: list[Resource], load: dict[str, int]) -> Resource | None:
    """The node the scheduler picks: schedulable, tolerated taints, matching nodeSelector, least loaded."""
    spec = pod["spec"]
    tolerations = spec.get("tolerations") or []
    selector = spec.get("nodeSelector") or {}
    fitting = [
        n
        for n in nodes
        if not (n.spec or {}).get("unschedulable")
        and all(
            t.get("effect") == "PreferNoSchedule" or tolerates(tolerations, t)
            for t in (n.spec or {}).get("taints") or ()
        )
        and all(n.metadata.labels.get(k) == v for k, v in selector.items())
    ]
    return min(fitting, key=lambda n: (load.get(n.name, 0), n.name), default=None)


def unschedulable_status(nodes: int) -> dict[str, Any]:
    return {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": f"0/{nodes} nodes are available: no node fits the pod.",
            }
        ],
        "qosClass": "BestEffort",
    }
