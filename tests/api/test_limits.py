"""The server's limits through a real ``herder serve``: request bodies above the size limit answer 413
on every path that reads one, the stored audit trail stays within its count, and failed
authentication from one address is answered 429 while a good token from it still works.

The module has its own server (small limits), and the rate limit test comes last: it leaves the
loopback address limited.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from herder.client.kubeconfig import load
from tests.api.server import Server, running

MAX_BODY = 64 * 1024
MAX_EVENTS = 5
CP = "/apis/herder.dev/v1alpha1/namespaces/default/configpatches"
EVENTS = "/apis/herder.dev/v1alpha1/auditevents"
MERGE = {"Content-Type": "application/merge-patch+json"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    flags = ("--max-body-bytes", str(MAX_BODY), "--audit-max-events", str(MAX_EVENTS))
    with running(tmp_path_factory.mktemp("limits") / "data", *flags) as s:
        yield s


def admin_token(server: Server) -> str:
    token = load(server.kubeconfig).token
    assert token
    return token


def patch_body(name: str, size: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "herder.dev/v1alpha1",
        "kind": "ConfigPatch",
        "metadata": {"name": name},
        "spec": {"data": "machine: {}", "description": "x" * size},
    }


async def test_bodies_above_the_limit_are_refused_413_on_every_path(server: Server) -> None:
    big = json.dumps(patch_body("big", MAX_BODY)).encode()
    async with server.http(admin_token(server)) as http:
        assert (await http.post(CP, json=patch_body("fits", MAX_BODY // 2))).status_code == 201

        async def streamed() -> AsyncIterator[bytes]:
            for start in range(0, len(big), 8192):
                yield big[start : start + 8192]

        for attempt in (
            http.post(CP, content=big, headers={"Content-Type": "application/json"}),
            # Without a Content-Length: counted as it arrives.
            http.post(CP, content=streamed(), headers={"Content-Type": "application/json"}),
            http.put(f"{CP}/fits", content=big, headers={"Content-Type": "application/json"}),
            http.patch(f"{CP}/fits", content=big, headers=MERGE),
            http.request("DELETE", f"{CP}/fits", content=big, headers={"Content-Type": "application/json"}),
            http.post("/apis/herder.dev/v1alpha1/serviceaccounts/admin/token", content=big),
        ):
            answer = await attempt
            assert answer.status_code == 413, answer.text
            status = answer.json()
            assert status["kind"] == "Status" and status["reason"] == "RequestEntityTooLarge"
            assert str(MAX_BODY) in status["message"]
        assert (await http.get(f"{CP}/fits")).json()["spec"]["description"] == "x" * (MAX_BODY // 2)


async def test_the_stored_audit_trail_keeps_to_its_count(server: Server) -> None:
    async with server.http(admin_token(server)) as http:
        for i in range(3 * MAX_EVENTS):
            assert (await http.post(CP, json=patch_body(f"audited-{i:02d}"))).status_code == 201
        for _ in range(100):
            events = (await http.get(EVENTS)).json()["items"]
            if len(events) <= MAX_EVENTS + 1:  # the pruner starts a little past the limit
                break
            await asyncio.sleep(0.1)
    names = [e["spec"]["name"] for e in events]
    assert len(names) <= MAX_EVENTS + 1 and names[-1] == f"audited-{3 * MAX_EVENTS - 1:02d}", names


async def test_failed_authentication_is_rate_limited_but_good_tokens_still_work(server: Server) -> None:
    good = admin_token(server)
    log_lines = len((server.data_dir / "audit.log").read_text().splitlines())
    async with server.http("hdr_guess-00000000_" + "0" * 64) as stranger, server.http(good) as friend:
        answers = [await stranger.post(CP, json=patch_body("by-stranger")) for _ in range(25)]
        codes = [a.status_code for a in answers]
        assert codes[:20] == [401] * 20 and set(codes[20:]) == {429}, codes
        limited = answers[-1]
        retry_after = int(limited.headers["Retry-After"])
        assert 1 <= retry_after <= 6
        status = limited.json()
        assert status["kind"] == "Status" and status["reason"] == "TooManyRequests" and status["code"] == 429
        assert status["details"]["retryAfterSeconds"] == retry_after
        # A request without any token fails authentication as well.
        assert (await stranger.get(CP, headers={"Authorization": ""})).status_code == 429
        # The same address with a good token is served as ever, reads and writes.
        assert (await friend.get(CP)).status_code == 200
        assert (await friend.post(CP, json=patch_body("by-friend"))).status_code == 201
        assert (await stranger.get(CP)).status_code == 429
    # The 401s are in audit.log; the flood of 429s is not.
    lines = [
        json.loads(line) for line in (server.data_dir / "audit.log").read_text().splitlines()[log_lines:]
    ]
    assert [line["code"] for line in lines if line["user"] == ""] == [401] * 20
