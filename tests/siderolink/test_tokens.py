"""Join tokens on the in-memory store: a made token lets a machine in until it is revoked or expires; a
wrong secret, an unknown name and a foreign string are refused, each saying why; a provider's JoinConfig
token lets its machines in; and addresses and kernel arguments as Talos reads them."""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from herder.resources import Resource
from herder.siderolink import tokens
from herder.siderolink.addresses import node_address, parse_prefix, server_address
from herder.state.store import SYSTEM, Store
from herder.talos.siderolink import kernel_args
from tests.controllers.site import Site


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    site = await Site.start()  # sealing sensitive kinds, as herder's store does
    try:
        yield site.store
    finally:
        await site.close()


async def _token(store: Store, name: str, **spec: object) -> str:
    made = tokens.make(name)
    await store.create(
        Resource.model_validate(
            {
                "apiVersion": "herder.dev/v1alpha1",
                "kind": "JoinToken",
                "metadata": {"name": name},
                "spec": {"digest": made.digest, **spec},
            }
        ),
        actor=SYSTEM,
    )
    return made.token


async def test_a_token_admits_until_revoked(store: Store) -> None:
    token = await _token(store, "site-a")
    assert token.startswith("hjt_site-a_") and tokens.digest(token.rsplit("_", 1)[1]) not in token
    assert await tokens.admit(store, token) == tokens.Admitted("site-a", join_token="site-a")
    current = await store.get("JoinToken", "site-a")
    current.spec = {**(current.spec or {}), "revoked": True}
    await store.update(current, actor=SYSTEM)
    with pytest.raises(tokens.Refused, match="site-a is revoked"):
        await tokens.admit(store, token)


async def test_an_expired_token_is_refused(store: Store) -> None:
    token = await _token(store, "short", expiresAt="2026-01-01T00:00:00Z")
    assert await tokens.admit(store, token, datetime(2025, 12, 31, tzinfo=UTC))
    with pytest.raises(tokens.Refused, match="expired at 2026-01-01T00:00:00Z"):
        await tokens.admit(store, token, datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=1))


async def test_wrong_unknown_and_foreign_tokens_are_refused(store: Store) -> None:
    token = await _token(store, "site-a")
    name, secret = token.split("_")[1:]
    with pytest.raises(tokens.Refused, match="wrong secret"):
        await tokens.admit(store, f"hjt_{name}_{'0' * 64}")
    with pytest.raises(tokens.Refused, match="site-b does not exist"):
        await tokens.admit(store, f"hjt_site-b_{secret}")
    with pytest.raises(tokens.Refused, match="not a join token"):
        await tokens.admit(store, "something-else")
    with pytest.raises(tokens.Refused, match="no join token"):
        await tokens.admit(store, "")


async def test_a_provider_s_join_config_token_admits_its_machines(store: Store) -> None:
    await store.create(
        Resource.model_validate(
            {
                "apiVersion": "herder.dev/v1alpha1",
                "kind": "JoinConfig",
                "metadata": {"name": "emu"},
                "spec": {"endpoint": "https://h:1", "token": "provider-secret"},
            }
        ),
        actor=SYSTEM,
    )
    assert await tokens.admit(store, "provider-secret") == tokens.Admitted("provider/emu", provider="emu")


def test_addresses_in_the_prefix() -> None:
    prefix = parse_prefix("fdae:41e4:649b:9303::/64")
    assert str(server_address(prefix)) == "fdae:41e4:649b:9303::1/64"
    first = node_address(prefix, "u-1", set())
    assert first == node_address(prefix, "u-1", set())  # the same machine, the same address
    assert first.network == prefix and first.ip != server_address(prefix).ip
    assert node_address(prefix, "u-1", {first.ip}) != first
    tiny = parse_prefix("fd00::/120")
    taken = {ipaddress.IPv6Address(f"fd00::{n:x}") for n in range(2, 255)}
    with pytest.raises(ValueError, match="no free address"):
        node_address(tiny, "u-2", taken)
    for bad in ("10.0.0.0/8", "fd00::/126", "fd00::1/64", "nonsense"):
        with pytest.raises(ValueError, match="--siderolink-prefix"):
            parse_prefix(bad)


def test_kernel_args_round_trip_as_talos_reads_them() -> None:
    made = kernel_args.join_args("grpc://192.0.2.7:8099", "hjt_a_" + "1" * 64, "fdae::1")
    line = " ".join(["console=ttyS0", *made.kernel_args()])
    parsed = kernel_args.parse(line)
    assert parsed == made and parsed.target == "192.0.2.7:8099" and not parsed.secure
    assert parsed.events_sink == "[fdae::1]:8090" and parsed.kernel_log == "tcp://[fdae::1]:8092"
    for bad, why in (
        ("console=tty0", "missing"),
        ("siderolink.api=http://h:1?jointoken=t", "expected grpc://"),
        ("siderolink.api=grpc://h:1", "no \\?jointoken"),
    ):
        with pytest.raises(kernel_args.JoinArgsError, match=why):
            kernel_args.parse(bad)
