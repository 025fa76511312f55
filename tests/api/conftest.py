"""One real server per test module, and a service account with a token for every role."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from herder.resources import Resource
from herder.resources.access import ROLES, SERVICE_ACCOUNT
from tests.api.server import Server, running

PROVIDER = "p1"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running(tmp_path_factory.mktemp("herder") / "data") as s:
        yield s


def account(name: str, role: str, provider_id: str | None = None) -> Resource:
    spec = {"role": role, **({"providerId": provider_id} if provider_id else {})}
    return Resource.model_validate(
        {
            "apiVersion": SERVICE_ACCOUNT.api_version,
            "kind": SERVICE_ACCOUNT.kind,
            "metadata": {"name": name},
            "spec": spec,
        }
    )


async def make_account(server: Server, name: str, role: str, provider_id: str | None = None) -> str:
    """Create a service account as admin and return a fresh token of it."""
    async with server.client() as admin:
        await admin.create(account(name, role, provider_id))
        return (await admin.issue_token(SERVICE_ACCOUNT, name)).token


@pytest.fixture(scope="module")
def tokens(server: Server) -> dict[str, str]:
    """A token per role; the InfraProvider one acts for provider ``p1``."""

    async def make() -> dict[str, str]:
        return {
            role: await make_account(
                server, f"as-{role.lower()}", role, PROVIDER if role == "InfraProvider" else None
            )
            for role in ROLES
        }

    return asyncio.run(make())


@pytest.fixture(scope="module")
def reader_kubeconfig(server: Server, tokens: dict[str, str]) -> Path:
    return server.kubeconfig_for(tokens["Reader"], "reader")
