"""``herder.client`` against a real server: every verb, watch, and errors as typed exceptions."""

from __future__ import annotations

import asyncio

import pytest

from herder.client import (
    AlreadyExists,
    Client,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    TransportError,
    WatchEvent,
)
from herder.client.kubeconfig import Credentials, load
from herder.resources import Resource
from tests.api.server import Server, free_port


def config_patch(name: str, data: str = "machine: {}", **meta: object) -> Resource:
    return Resource.model_validate(
        {
            "apiVersion": "herder.dev/v1alpha1",
            "kind": "ConfigPatch",
            "metadata": {"name": name, "namespace": "default", **meta},
            "spec": {"data": data},
        }
    )


async def test_crud_verbs(server: Server) -> None:
    async with server.client() as client:
        created = await client.create(config_patch("client-crud", labels={"team": "a"}))
        assert created.metadata.uid and created.metadata.generation == 1
        got = await client.get("cp", "client-crud")
        assert got.spec == {"data": "machine: {}", "description": ""}
        got.spec = {"data": "cluster: {}"}
        updated = await client.update(got)
        assert updated.metadata.generation == 2
        patched = await client.patch("configpatches", "client-crud", {"metadata": {"labels": {"team": "b"}}})
        assert patched.metadata.labels == {"team": "b"}
        json_patched = await client.patch(
            "ConfigPatch",
            "client-crud",
            [{"op": "replace", "path": "/spec/description", "value": "j"}],
            type="json",
        )
        assert json_patched.spec is not None and json_patched.spec["description"] == "j"
        assert [o.name for o in (await client.list("cp", "default", label_selector="team=b")).items] == [
            "client-crud"
        ]
        assert await client.delete("cp", "client-crud") is None
        with pytest.raises(NotFound, match='"client-crud" not found'):
            await client.get("cp", "client-crud")


async def test_list_pages_through_everything(server: Server) -> None:
    async with server.client() as client:
        for i in range(7):
            await client.create(config_patch(f"paged-{i}", labels={"paged": "yes"}))
        listed = await client.list("cp", label_selector="paged=yes")
        assert sorted(o.name for o in listed.items) == [f"paged-{i}" for i in range(7)]
        assert len((await client.list("cp", label_selector="paged=yes", limit=3)).items) == 3


async def test_finalizers_hold_a_deleted_object(server: Server) -> None:
    async with server.client() as client:
        await client.create(config_patch("held", finalizers=["example.com/hold"]))
        marked = await client.delete("cp", "held")
        assert marked is not None and marked.metadata.deletion_timestamp
        await client.patch("cp", "held", {"metadata": {"finalizers": None}})
        with pytest.raises(NotFound):
            await client.get("cp", "held")


async def test_errors_are_typed_and_carry_the_status_message(server: Server) -> None:
    async with server.client() as client:
        first = await client.create(config_patch("typed"))
        with pytest.raises(AlreadyExists) as exists:
            await client.create(config_patch("typed"))
        assert exists.value.code == 409 and "already exists" in exists.value.message
        stale = first.model_copy(deep=True)
        await client.patch("cp", "typed", {"spec": {"description": "newer"}})
        stale.spec = {"data": "x: 1"}
        with pytest.raises(Conflict, match="the object has been modified"):
            await client.update(stale)
        with pytest.raises(Invalid) as invalid:
            await client.create(config_patch("bad", data=""))
        assert [c["field"] for c in invalid.value.causes] == ["spec.data"]
        ns = await client.get("ns", "default")
        with pytest.raises(Forbidden):
            await client.update_status(ns)


async def test_watch_sees_changes(server: Server) -> None:
    async with server.client() as watcher, server.client() as writer:
        listed = await watcher.list("cp", "default")
        seen: list[WatchEvent] = []

        async def watch() -> None:
            async for event in watcher.watch("cp", "default", resource_version=listed.resource_version):
                seen.append(event)
                if event.type == "DELETED":
                    return

        task = asyncio.create_task(watch())
        await asyncio.sleep(0.3)
        await writer.create(config_patch("watched"))
        await writer.patch("cp", "watched", {"spec": {"description": "d"}})
        await writer.delete("cp", "watched")
        await asyncio.wait_for(task, 10)
    assert [(e.type, e.object.name) for e in seen] == [
        ("ADDED", "watched"),
        ("MODIFIED", "watched"),
        ("DELETED", "watched"),
    ]


async def test_unreachable_server_is_a_transport_error(server: Server) -> None:
    async with Client(Credentials(f"https://127.0.0.1:{free_port()}", "t", server.ca)) as client:
        with pytest.raises(TransportError, match="cannot reach"):
            await client.list("ns")


async def test_a_server_that_says_nothing_is_an_error_that_says_why() -> None:
    """A timeout has no message of its own: the error still says what happened, never an empty reason
    after a colon."""

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # accepts, answers nothing until the client leaves
        writer.close()

    quiet = await asyncio.start_server(silent, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{quiet.sockets[0].getsockname()[1]}"
    try:
        async with Client(Credentials(url, "t", None), timeout=0.3) as client:
            with pytest.raises(TransportError) as raised:
                await client.list("ns")
    finally:
        quiet.close()
    assert str(raised.value) == f"cannot reach {url}: ReadTimeout"


async def test_a_quiet_watch_outlasts_the_client_timeout(server: Server) -> None:
    """Between events a watch is silent (bookmarks come every 30 s): a request timeout must not end it."""
    credentials = load(server.kubeconfig)
    async with Client(credentials, timeout=0.5) as watcher, server.client() as writer:
        listed = await watcher.list("cp", "default")
        seen: list[WatchEvent] = []

        async def watch() -> None:
            async for event in watcher.watch("cp", "default", resource_version=listed.resource_version):
                seen.append(event)
                return

        task = asyncio.create_task(watch())
        await asyncio.sleep(2)  # four client timeouts of silence
        await writer.create(config_patch("after-silence"))
        await asyncio.wait_for(task, 10)  # a broken watch raises here
    assert [(e.type, e.object.name) for e in seen] == [("ADDED", "after-silence")]
