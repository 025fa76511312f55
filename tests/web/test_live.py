"""The UI's event stream outlives the API's watches under it: a watch the API ends is resumed from the
last revision seen, so a change after it still reaches the page. herder's API and UI run in-process on a
real SQLite store, with the API's watches made to end every second."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from herder.bench.web import signed_in
from herder.client import Client, WatchEvent
from herder.resources import Resource
from herder.state.store import SYSTEM
from herder.web import live


def _cluster(name: str) -> Resource:
    return Resource.model_validate(
        {
            "apiVersion": "herder.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"talosVersion": "v1.13.9", "kubernetesVersion": "1.33.0"},
        }
    )


async def test_a_watch_the_api_ends_is_resumed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "WATCH_SECONDS", 1)
    # The UI's watches of the API, counted as the API ends them.
    ended = 0
    twice = asyncio.Event()
    watch = Client.watch

    async def counted(self: Client, *args: Any, **kwargs: Any) -> AsyncIterator[WatchEvent]:
        nonlocal ended
        async for event in watch(self, *args, **kwargs):
            yield event
        ended += 1
        if ended >= 2:
            twice.set()

    monkeypatch.setattr(Client, "watch", counted)
    async with signed_in(tmp_path) as (store, http):
        await store.create(_cluster("before"), actor=SYSTEM)
        page = (await http.get("/clusters")).text
        rv = page.split('data-rv="')[1].split('"')[0]
        seen: list[dict[str, str]] = []

        async def listen() -> None:
            async with http.stream("GET", "/events", params={"watch": "clusters", "rv": rv}) as stream:
                async for line in stream.aiter_lines():
                    if line.startswith("data: "):
                        seen.append(json.loads(line[6:]))
                        if seen[-1]["name"] == "after":
                            return

        listening = asyncio.create_task(listen())
        await asyncio.wait_for(twice.wait(), 10)  # two of the API's watches have ended
        await store.create(_cluster("after"), actor=SYSTEM)
        await asyncio.wait_for(listening, 10)
        assert [(c["type"], c["name"]) for c in seen] == [("ADDED", "after")]
