"""A template's cluster as a tree (cluster → its rollouts and machine sets → machines, each with its phase
or stage, its versions and the error it reports), and whether it is healthy: the Cluster ``Ready`` at its
latest generation, every machine set too, no rollout left unfinished, and every machine running the
cluster's Talos and Kubernetes versions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from herder.cli.watching import Watched
from herder.resources import Resource
from herder.resources.clusters import CLUSTER, CLUSTER_MACHINE, MACHINE_SET
from herder.resources.machines import CLUSTER_LABEL, MACHINE_SET_LABEL
from herder.resources.status import condition_true, find_condition


@dataclass(frozen=True)
class Line:
    depth: int
    key: str
    text: str
    ok: bool


def follow_cluster(watched: Watched, name: str) -> Watched:
    selector = f"{CLUSTER_LABEL}={name}"
    return (
        watched.follow(CLUSTER, fields=f"metadata.name={name}")
        .follow(MACHINE_SET, labels=selector)
        .follow(CLUSTER_MACHINE, labels=selector)
    )


def _bare(version: Any) -> str:
    return str(version or "").removeprefix("v")


def _current(obj: Resource) -> bool:
    status = obj.status or {}
    return bool(status.get("observedGeneration")) and status["observedGeneration"] == obj.metadata.generation


def _error(status: dict[str, Any]) -> str:
    """The error an object reports now: its first false condition with a message, else a kept error."""
    for condition in status.get("conditions") or ():
        if condition.get("status") != "True" and condition.get("message"):
            return f"{condition['type']}: {condition['message']}"
    kept = (
        (status.get("apply") or {}).get("lastError"),
        (status.get("upgrade") or {}).get("error"),
        (status.get("allocation") or {}).get("reason"),
        status.get("teardown"),
    )
    return str(next((e for e in kept if e), ""))


def _machine_versions(member: Resource, talos: str, kubernetes: str) -> tuple[str, bool]:
    spec, status = member.spec or {}, member.status or {}
    running = _bare(status.get("talosVersion"))
    wanted = {
        "talos": (_bare(spec.get("talosVersion")), talos),
        "kubernetes": (_bare(spec.get("kubernetesVersion")), kubernetes),
    }
    done = running == talos and all(a == b for a, b in wanted.values())
    if "kubernetesVersion" in status:
        done = done and _bare(status["kubernetesVersion"]) == kubernetes
    text = f"Talos v{running or '?'}" + ("" if running == talos else f" → v{talos}")
    return text, done


def tree(watched: Watched, name: str) -> tuple[list[Line], bool]:
    """The lines of the tree, and whether the cluster is healthy with every rollout done."""
    cluster = watched.get(CLUSTER, name)
    if cluster is None:
        return [Line(0, f"cluster/{name}", f"cluster {name}: not found", False)], False
    spec, status = cluster.spec or {}, cluster.status or {}
    talos, kubernetes = _bare(spec.get("talosVersion")), _bare(spec.get("kubernetesVersion"))
    ready = condition_true(status, "Ready") and _current(cluster) and not cluster.metadata.deletion_timestamp
    machines = status.get("machines") or {}
    total = f"{machines.get('ready', 0)}/{machines.get('wanted', machines.get('total', 0))} machines"
    head = f"cluster {name}: {status.get('phase', 'Provisioning')}, {'Ready' if ready else 'not ready'}, Talos v{talos}, Kubernetes {kubernetes}, {total}"
    message = (find_condition(status.get("conditions"), "Ready") or {}).get("message")
    if not ready and message:
        head += f" — {message}"
    lines = [Line(0, f"cluster/{name}", head, ready)]
    healthy = ready
    for rollout in status.get("rollouts") or ():
        finished = rollout.get("state") == "Done"
        healthy = healthy and finished
        what = " ".join(str(p) for p in (rollout.get("kind"), rollout.get("target")) if p)
        text = (
            f"rollout {what}: {rollout.get('done', 0)}/{rollout.get('total', 0)}, {rollout.get('state', '')}"
        )
        if rollout.get("message"):
            text += f" — {rollout['message']}"
        lines.append(Line(1, f"rollout/{rollout.get('kind')}", text, finished))
    members = watched.of(CLUSTER_MACHINE)
    for machine_set in watched.of(MACHINE_SET):
        set_status = machine_set.status or {}
        set_ready = condition_true(set_status, "Ready") and _current(machine_set)
        healthy = healthy and set_ready and not machine_set.metadata.deletion_timestamp
        counts = set_status.get("machines") or {}
        text = (
            f"machineset {machine_set.name} ({(machine_set.spec or {}).get('role', '?')}): "
            f"{set_status.get('phase', 'Provisioning')}, "
            f"{counts.get('ready', 0)}/{counts.get('wanted', counts.get('total', 0))} ready"
        )
        error = _error(set_status) if not set_ready else ""
        lines.append(
            Line(1, f"machineset/{machine_set.name}", text + (f" — {error}" if error else ""), set_ready)
        )
        for member in members:
            if member.metadata.labels.get(MACHINE_SET_LABEL) != machine_set.name:
                continue
            member_status = member.status or {}
            versions, done = _machine_versions(member, talos, kubernetes)
            member_ready = bool(member_status.get("ready"))
            healthy = healthy and done and member_ready
            text = (
                f"machine {member.name}: {member_status.get('stage', 'Unknown')}, "
                f"{'ready' if member_ready else 'not ready'}, {versions}"
            )
            error = _error(member_status)
            lines.append(
                Line(
                    2,
                    f"clustermachine/{member.name}",
                    text + (f" — {error}" if error else ""),
                    member_ready and done,
                )
            )
    return lines, healthy
