"""Recording the configs herder applies: after each successful apply, the machine's MachineConfigHistory
gets an entry with the diff from the config applied before (secrets redacted), keeping the newest
``MAX_ENTRIES`` and none older than ``MAX_AGE_SECONDS``; a machine in another cluster than its history
names starts a new one. The history of a machine the platform manages (read-only: a managed control
plane) is hidden, under the reserved name ``herder-UUID``: its configs are the platform's. ``ConfigApply`` records (it alone knows exactly what it applied); the age of what
is kept is looked after by ``config_history_retention``.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from herder.resources import Resource
from herder.resources.access import HIDDEN_LABEL, READ_ONLY_ANNOTATION
from herder.resources.config_history import (
    MACHINE_CONFIG_HISTORY,
    MAX_AGE_SECONDS,
    MAX_ENTRIES,
    ConfigHistoryEntry,
    MachineConfigHistorySpec,
)
from herder.resources.machines import CLUSTER_LABEL, MACHINE_LABEL
from herder.runtime.controller import Context, ObjectKey
from herder.runtime.outputs import Output, Writes
from herder.state.errors import AlreadyExists
from herder.talos.config_redaction import config_diff, redact_config

OUTPUT: Output = Writes(MACHINE_CONFIG_HISTORY.kind, "spec", "metadata.labels", creates=True)
"""What recording writes, for the declaration of the controller that records."""


def history_name(member: Resource) -> str:
    """The name of a member's history: its machine's UUID, reserved (hidden) for the platform's machines."""
    return f"herder-{member.name}" if READ_ONLY_ANNOTATION in member.metadata.annotations else member.name


def kept(entries: list[ConfigHistoryEntry], now: datetime) -> list[ConfigHistoryEntry]:
    """The entries kept: the newest ``MAX_ENTRIES``, none applied more than ``MAX_AGE_SECONDS`` ago."""
    cutoff = now - timedelta(seconds=MAX_AGE_SECONDS)
    return [e for e in entries[-MAX_ENTRIES:] if _time(e.applied_at) >= cutoff]


def _time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


async def record_applied(
    ctx: Context, member: Resource, config: str, digest: str, talos_version: str, mode: str
) -> None:
    """Append what was applied to ``member``'s machine to its history."""
    cluster = member.metadata.labels.get(CLUSTER_LABEL, "")
    labels = {CLUSTER_LABEL: cluster, MACHINE_LABEL: member.name}
    name = history_name(member)
    if name != member.name:
        labels[HIDDEN_LABEL] = "true"
    key = ObjectKey(MACHINE_CONFIG_HISTORY.kind, member.namespace, name)
    redacted = await asyncio.to_thread(redact_config, config)
    when = ctx.clock.rfc3339()

    def appended(spec: MachineConfigHistorySpec) -> MachineConfigHistorySpec:
        if spec.cluster != cluster:
            spec = MachineConfigHistorySpec(cluster=cluster)  # another cluster's history is not for this one
        elif spec.entries and spec.entries[-1].hash == digest:
            return spec  # applied again (after a crash before its status said so): nothing new
        diff, added, removed = config_diff(spec.current, redacted)
        entry = ConfigHistoryEntry(
            revision=spec.entries[-1].revision + 1 if spec.entries else 1,
            appliedAt=when,
            hash=digest,
            talosVersion=talos_version,
            mode=mode,
            added=added,
            removed=removed,
            diff=diff,
        )
        return MachineConfigHistorySpec(
            cluster=cluster, current=redacted, entries=kept([*spec.entries, entry], _time(when))
        )

    def change(obj: Resource) -> None:
        spec = appended(MACHINE_CONFIG_HISTORY.spec_of(obj, MachineConfigHistorySpec))
        obj.spec = spec.model_dump(mode="json", by_alias=True)
        obj.metadata.labels = {**obj.metadata.labels, **labels}

    for _ in range(3):
        if await ctx.mutate(key, change) is not None:
            return
        first = appended(MachineConfigHistorySpec(cluster=cluster))
        try:
            await ctx.create(
                Resource.model_validate(
                    {
                        "apiVersion": MACHINE_CONFIG_HISTORY.api_version,
                        "kind": MACHINE_CONFIG_HISTORY.kind,
                        "metadata": {"name": name, "namespace": member.namespace, "labels": labels},
                        "spec": first.model_dump(mode="json", by_alias=True),
                    }
                )
            )
            return
        except AlreadyExists:
            continue  # made meanwhile: append to it
