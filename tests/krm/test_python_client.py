"""The official ``kubernetes`` Python client's DynamicClient discovers, lists and watches herder kinds."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, dynamic
from kubernetes.dynamic.exceptions import ConflictError, NotFoundError, UnprocessibleEntityError

from tests.krm.conftest import Server


@pytest.fixture
def dyn(server: Server) -> Iterator[dynamic.DynamicClient]:
    config = client.Configuration()
    config.host = server.url
    config.ssl_ca_cert = str(server.tls.ca)
    with client.ApiClient(config) as api:
        yield dynamic.DynamicClient(api, cache_file=None)


def body(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "ConfigPatch",
        "metadata": {"name": name, "labels": labels},
        "spec": {"data": "machine: {}"},
    }


def test_discovers_lists_and_watches(dyn: dynamic.DynamicClient) -> None:
    patches = dyn.resources.get(api_version="herder.dev/v1alpha1", kind="ConfigPatch")
    assert patches.namespaced and patches.name == "configpatches" and "cp" in patches.short_names
    assert dyn.resources.get(api_version="v1", kind="Namespace").name == "namespaces"

    patches.create(body=body("py-one", source="python"), namespace="default")
    listed = patches.get(namespace="default", label_selector="source=python")
    assert [i.metadata.name for i in listed.items] == ["py-one"]
    rv = listed.metadata.resourceVersion

    seen: list[tuple[str, str]] = []
    done = threading.Event()

    def watch() -> None:
        for event in patches.watch(
            namespace="default", label_selector="source=python", resource_version=rv, timeout=10
        ):
            seen.append((event["type"], event["object"].metadata.name))
            if len(seen) == 3:
                done.set()
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    patches.create(body=body("py-two", source="python"), namespace="default")
    patches.patch(
        name="py-two",
        namespace="default",
        body={"spec": {"description": "changed"}},
        content_type="application/merge-patch+json",
    )
    patches.delete(name="py-two", namespace="default")
    assert done.wait(15), seen
    assert seen == [("ADDED", "py-two"), ("MODIFIED", "py-two"), ("DELETED", "py-two")]

    with pytest.raises(NotFoundError):
        patches.get(name="py-two", namespace="default")
    with pytest.raises(UnprocessibleEntityError) as err:
        patches.create(body={**body("py-bad"), "spec": {"data": "x", "nope": 1}}, namespace="default")
    assert "spec.nope" in str(err.value.body)


def test_server_side_apply_and_delete_collection(dyn: dynamic.DynamicClient) -> None:
    patches = dyn.resources.get(api_version="herder.dev/v1alpha1", kind="ConfigPatch")
    for name in ("py-applied", "py-applied-too"):
        applied = patches.server_side_apply(
            body=body(name, source="python-ssa"), namespace="default", field_manager="py-tool"
        )
        assert [(e.manager, e.operation) for e in applied.metadata.managedFields] == [("py-tool", "Apply")]
    with pytest.raises(ConflictError) as conflict:
        patches.server_side_apply(
            body={**body("py-applied"), "spec": {"data": "other: {}"}},
            namespace="default",
            field_manager="rival",
        )
    assert conflict.value.body and '"field":".spec.data"' in conflict.value.body
    # The client's own user agent names the manager of its other writes.
    patched = patches.patch(
        name="py-applied",
        namespace="default",
        body={"metadata": {"labels": {"extra": "1"}}},
        content_type="application/merge-patch+json",
    )
    assert ("OpenAPI-Generator", "Update") in [
        (e.manager, e.operation) for e in patched.metadata.managedFields
    ]
    deleted = patches.delete(namespace="default", label_selector="source=python-ssa")
    assert sorted(i.metadata.name for i in deleted.items) == ["py-applied", "py-applied-too"]
    assert patches.get(namespace="default", label_selector="source=python-ssa").items == []
