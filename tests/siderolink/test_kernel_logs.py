"""A joined machine's kernel log as the sink hands it on: kept in the machine's logs as its ``kernel``
source, in the scope the store gives the machine (a machine allocated to a cluster moves its new lines
there), with the join token of its kernel command line taken out; lines that come before the Machine is
made (a joined machine's boot log comes at once) are held for it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from herder.resources import Resource
from herder.resources.catalog import herder_registry
from herder.resources.machines import CLUSTER_LABEL
from herder.siderolink import kernel_logs
from herder.siderolink.kernel_logs import KernelLogs
from herder.state.machine_logs import KERNEL, LogScope, MachineLogs
from herder.state.memory import MemoryBackend
from herder.state.store import Store
from herder.talos.redaction import REDACTED

UUID = "6e0f3a52-1d6b-4c3e-9a57-0d5c8b1f2a10"
TOKEN = "hjt_edge_" + "a" * 64


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    async with Store(MemoryBackend(), herder_registry()) as made:
        await made.create(
            Resource.model_validate(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}
            )
        )
        yield made


def _machine(labels: dict[str, str] | None = None) -> Resource:
    return Resource.model_validate(
        {
            "apiVersion": "herder.dev/v1alpha1",
            "kind": "Machine",
            "metadata": {"name": UUID, "namespace": "default", "labels": labels or {}},
            "spec": {"endpoint": "[fdae:41e4:649b:9303::2]:50000"},
        }
    )


def _kept(logs: MachineLogs) -> list[tuple[str, LogScope]]:
    entries = logs.entries("default", UUID, allowed=lambda scope: True, sources=[KERNEL])
    return [(entry.text, entry.scope) for entry in entries]


async def test_lines_are_kept_in_the_machines_scope_with_the_join_token_taken_out(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = MachineLogs(tmp_path)
    keeper = KernelLogs(store, logs, "default")
    monkeypatch.setattr(kernel_logs, "RETRY", 0.01)
    cmdline = f"kern: info: [t1]: Command line: siderolink.api=grpc://[fd00::1]:8099?jointoken={TOKEN} quiet"
    await keeper.keep(UUID, [cmdline])
    await asyncio.sleep(0.05)
    assert _kept(logs) == []

    made = await store.create(_machine())
    for _ in range(100):
        if _kept(logs):
            break
        await asyncio.sleep(0.01)
    loose = LogScope("default")
    assert _kept(logs) == [
        (
            f"kern: info: [t1]: Command line: siderolink.api=grpc://[fd00::1]:8099?jointoken={REDACTED} quiet",
            loose,
        )
    ]

    # Allocated to a cluster: its lines after the scope is read again are that cluster's.
    await store.update(
        made.model_copy(
            update={"metadata": made.metadata.model_copy(update={"labels": {CLUSTER_LABEL: "edge"}})}
        )
    )
    monkeypatch.setattr(kernel_logs, "SCOPE_TTL", 0.0)
    await keeper.keep(UUID, ["kern: info: [t2]: eth0: link up"])
    assert _kept(logs)[-1] == ("kern: info: [t2]: eth0: link up", LogScope("default", "edge"))
    await keeper.close()
    logs.close()
