"""The web UI over HTTP against a real ``herder serve``: sign-in and its cookie, CSRF refusals, a Reader's
pages and refused POSTs, hidden objects absent from page sources, live updates as server-sent events,
bad form input answered with the field named, never a 500."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.api.server import Server
from tests.web.ui import Ui

CLUSTERS = "/apis/herder.dev/v1alpha1/namespaces/default/clusters"
CLASSES = "/apis/herder.dev/v1alpha1/namespaces/default/machineclasses"


def cluster(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"talosVersion": "v1.13.9", "kubernetesVersion": "1.33.0"},
    }


@pytest.fixture(scope="module")
def objects(server: Server, tokens: dict[str, str]) -> None:
    """A visible cluster and a hidden one (made by Support), and a machine class."""

    async def make() -> None:
        async with server.http(tokens["Support"]) as support:
            for body in (cluster("open"), cluster("herder-secret", **{"herder.dev/hidden": "true"})):
                made = await support.post(CLUSTERS, json=body)
                assert made.status_code == 201, made.text
            klass = {
                "apiVersion": "herder.dev/v1alpha1",
                "kind": "MachineClass",
                "metadata": {"name": "any", "namespace": "default"},
                "spec": {"selector": {}},
            }
            assert (await support.post(CLASSES, json=klass)).status_code == 201

    asyncio.run(make())


async def test_sign_in_sets_a_strict_session_cookie_and_never_shows_the_token(
    server: Server, tokens: dict[str, str]
) -> None:
    async with Ui(server) as ui:
        typed = await ui.http.get(server.url + "/ui", follow_redirects=True)  # as the demo prints it
        assert typed.status_code == 200 and 'type="password"' in typed.text
        form = await ui.http.get("/login")
        assert form.status_code == 200 and 'type="password"' in form.text
        answer = await ui.login(tokens["Operator"])
        assert answer.status_code == 303 and answer.headers["location"].endswith("/ui/clusters")
        cookie = next(c for c in answer.headers.get_list("set-cookie") if c.startswith("herder_session="))
        flags = {part.strip().lower() for part in cookie.split(";")}
        assert {"httponly", "secure", "samesite=strict", "path=/ui"} <= flags
        assert tokens["Operator"] not in cookie
        page = await ui.page("/clusters")
        assert page.status_code == 200 and "as-operator" in page.text and "Operator" in page.text
        assert tokens["Operator"] not in page.text
        assert page.headers["cache-control"] == "no-store"
        assert "script-src 'self'" in page.headers["content-security-policy"]
    assert tokens["Operator"] not in server.log.read_text()


async def test_a_bad_token_is_refused_and_makes_no_session(server: Server) -> None:
    async with Ui(server) as ui:
        answer = await ui.login("hdr_not-a-token")
        assert answer.status_code == 401 and "not valid" in answer.text
        assert not any(c.startswith("herder_session=") for c in answer.headers.get_list("set-cookie"))
        # Without a session every page leads to the sign-in page.
        page = await ui.page("/clusters")
        assert page.status_code == 303 and page.headers["location"].endswith("/ui/login")


async def test_posts_without_the_csrf_token_are_refused(server: Server, tokens: dict[str, str]) -> None:
    async with Ui(server) as ui:
        # The sign-in form itself: its token must match the cookie set with it.
        refused = await ui.http.post("/login", data={"token": tokens["Admin"]})
        assert refused.status_code == 403 and "CSRF" in refused.text
        await ui.login(tokens["Admin"])
        fields = {"name": "csrf-less", "controlPlaneClass": "any", "controlPlanes": "1", "workers": "0"}
        for csrf in (None, "wrong"):
            data = {**fields, "talosVersion": "v1.13.9", "kubernetesVersion": "1.33.0"}
            if csrf:
                data["csrf"] = csrf
            answer = await ui.http.post("/clusters", data=data)
            assert answer.status_code == 403 and "CSRF" in answer.text
        assert (await ui.http.post("/logout")).status_code == 403
    async with server.http(tokens["Admin"]) as api:
        assert (await api.get(f"{CLUSTERS}/csrf-less")).status_code == 404


@pytest.mark.usefixtures("objects")
async def test_a_reader_sees_no_action_and_a_direct_post_is_refused(
    server: Server, tokens: dict[str, str]
) -> None:
    async with Ui(server) as ui:
        await ui.login(tokens["Reader"])
        listing = (await ui.page("/clusters")).text
        assert "open" in listing and "Create cluster" not in listing
        detail = (await ui.page("/clusters/open")).text
        for button in ("Upgrade", "Scale", "Delete cluster", "Download kubeconfig", "Take a backup"):
            assert button not in detail, button
        assert "Create machine class" not in (await ui.page("/machineclasses")).text
        # Nor the forms, asked for by their address.
        for form in ("/clusters/new", "/machineclasses/new", "/clusters/open/delete"):
            shown = await ui.page(form)
            assert (
                shown.status_code == 403
                and "cannot" in shown.text
                and '<form method="post" action="/ui/clusters"' not in shown.text
            )
        assert "Audit log" not in listing  # not in the navigation: Admin and Support only
        assert (await ui.page("/audit")).status_code == 403
        for path, fields in (
            ("/clusters/open/delete", {"confirm": "open"}),
            ("/clusters/open/upgrade", {"component": "talos", "version": "v1.13.10"}),
        ):
            answer = await ui.post(path, **fields)
            assert answer.status_code == 403 and "forbidden" in answer.text, answer.text
    async with server.http(tokens["Admin"]) as api:
        still = (await api.get(f"{CLUSTERS}/open")).json()
        assert not still["metadata"].get("deletionTimestamp")
        assert still["spec"]["talosVersion"] == "v1.13.9"


@pytest.mark.usefixtures("objects")
async def test_hidden_objects_never_reach_a_page_below_support(
    server: Server, tokens: dict[str, str]
) -> None:
    async with Ui(server) as ui:
        await ui.login(tokens["Admin"])
        listing = await ui.page("/clusters")
        assert "herder-secret" not in listing.text and "open" in listing.text
        assert "1 cluster ·" in listing.text  # counted without it
        # Its page is not found, word for word as a cluster that never was.
        hidden = await ui.page("/clusters/herder-secret")
        never = await ui.page("/clusters/herder-never")
        assert hidden.status_code == never.status_code == 404
        assert hidden.text.replace("herder-secret", "X") == never.text.replace("herder-never", "X")
        assert (await ui.page("/controlplanes")).status_code == 403
    async with Ui(server) as ui:
        await ui.login(tokens["Support"])
        assert "herder-secret" in (await ui.page("/clusters")).text
        assert (await ui.page("/controlplanes")).status_code == 200


async def test_a_hidden_machines_page_and_log_are_not_found_as_if_it_never_was(
    server: Server, tokens: dict[str, str]
) -> None:
    machines = "/apis/herder.dev/v1alpha1/namespaces/default/machines"
    async with server.http(tokens["Support"]) as support:
        body = {
            "apiVersion": "herder.dev/v1alpha1",
            "kind": "Machine",
            "metadata": {"name": "herder-hidden-m", "labels": {"herder.dev/hidden": "true"}},
            "spec": {"endpoint": "127.0.0.1:9"},
        }
        assert (await support.post(machines, json=body)).status_code == 201
    async with Ui(server) as ui:
        await ui.login(tokens["Admin"])
        hidden, never = await ui.page("/machines/herder-hidden-m"), await ui.page("/machines/herder-never-m")
        assert hidden.status_code == never.status_code == 404
        assert hidden.text.replace("herder-hidden-m", "X") == never.text.replace("herder-never-m", "X")

        async def ended(name: str) -> list[str]:
            async with ui.http.stream("GET", f"/machines/{name}/log") as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                events = []
                async for line in stream.aiter_lines():
                    if line.startswith(("event: ", "data: ")):
                        events.append(line.replace(name, "X"))
                        if line.startswith("data: "):
                            return events
            return events

        assert await ended("herder-hidden-m") == await ended("herder-never-m")
        assert (await ended("herder-never-m"))[0] == "event: ended"
        assert (await ui.page("/machines/herder-never-m?source=%2E%2E%2Fx")).status_code == 400
    async with Ui(server) as ui:
        await ui.login(tokens["Support"])
        shown = await ui.page("/machines/herder-hidden-m")
        assert shown.status_code == 200 and 'id="machine-log"' in shown.text


@pytest.mark.usefixtures("objects")
async def test_live_updates_stream_visible_changes_only(server: Server, tokens: dict[str, str]) -> None:
    async with Ui(server) as ui:
        await ui.login(tokens["Reader"])
        page = (await ui.page("/clusters")).text
        rv = page.split('data-rv="')[1].split('"')[0]
        seen: list[dict[str, Any]] = []

        async def listen() -> None:
            async with ui.http.stream("GET", "/events", params={"watch": "clusters", "rv": rv}) as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                async for line in stream.aiter_lines():
                    if line.startswith("data: "):
                        seen.append(json.loads(line[6:]))
                        if seen[-1]["name"] == "live-one":
                            return

        listening = asyncio.create_task(listen())
        async with server.http(tokens["Support"]) as support:
            hidden = cluster("herder-live-hidden", **{"herder.dev/hidden": "true"})
            assert (await support.post(CLUSTERS, json=hidden)).status_code == 201
            assert (await support.post(CLUSTERS, json=cluster("live-one"))).status_code == 201
        await asyncio.wait_for(listening, 20)
        # Clusters the controllers still settle may change too; the hidden one never shows.
        names = [c["name"] for c in seen]
        assert names[-1] == "live-one" and "herder-live-hidden" not in names
        assert (await ui.http.get("/events", params={"watch": "nonsense", "rv": rv})).status_code == 400


@pytest.mark.usefixtures("objects")
async def test_bad_form_input_names_the_field(server: Server, tokens: dict[str, str]) -> None:
    async with Ui(server) as ui:
        await ui.login(tokens["Admin"])
        answers = {
            "size": await ui.post("/clusters/open/scale", machineSet="open-workers", size="four"),
            "matchLabels": await ui.post("/machineclasses", name="bad", matchLabels="zone"),
            "component": await ui.post("/clusters/open/upgrade", component="firmware", version="1"),
            "confirm": await ui.post("/clusters/open/delete", confirm="not-open"),
            "spec.talosVersion": await ui.post(
                "/clusters",
                name="badver",
                talosVersion="v9.99.0",
                kubernetesVersion="1.33.0",
                controlPlaneClass="any",
                controlPlanes="1",
                workers="0",
            ),
        }
        for field, answer in answers.items():
            assert 400 <= answer.status_code < 500, (field, answer.status_code, answer.text)
            assert field in answer.text, (field, answer.text)
        assert (await ui.page("/nowhere")).status_code == 404


async def test_sign_out_ends_the_session(server: Server, tokens: dict[str, str]) -> None:
    async with Ui(server) as ui:
        await ui.login(tokens["Reader"])
        old = ui.http.cookies["herder_session"]
        out = await ui.post("/logout")
        assert out.status_code == 303 and out.headers["location"].endswith("/ui/login")
        assert (await ui.page("/clusters")).status_code == 303
        # The old cookie, sent again by hand, names no session any more.
        again = await ui.http.get("/clusters", headers={"Cookie": f"herder_session={old}"})
        assert again.status_code == 303


async def test_a_none_identity_sees_and_acts_on_the_clusters_the_policy_grants_it(
    server: Server, tokens: dict[str, str], objects: None
) -> None:
    policy = {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "AccessPolicy",
        "metadata": {"name": "access-policy"},
        "spec": {"rules": [{"users": ["serviceaccount:as-none"], "clusters": ["open"], "role": "Operator"}]},
    }
    async with server.http(tokens["Admin"]) as admin:
        assert (await admin.post(CLUSTERS, json=cluster("closed"))).status_code == 201
        made = await admin.post("/apis/herder.dev/v1alpha1/accesspolicies", json=policy)
        assert made.status_code == 201, made.text
    try:
        async with Ui(server) as ui:
            assert (await ui.login(tokens["None"])).status_code == 303
            listing = (await ui.page("/clusters")).text
            assert "/clusters/open" in listing and "closed" not in listing
            detail = (await ui.page("/clusters/open")).text
            assert "Delete cluster" in detail  # Operator on open: its buttons are there
            assert (await ui.page("/clusters/closed")).status_code == 404
            assert "Create machine class" not in (await ui.page("/machineclasses")).text
    finally:
        async with server.http(tokens["Admin"]) as admin:
            await admin.delete("/apis/herder.dev/v1alpha1/accesspolicies/access-policy")
            await admin.delete(f"{CLUSTERS}/closed")
