"""Rejoin tokens: a machine's own, under herder's key, and no other machine's."""

from __future__ import annotations

import os

import pytest

from herder.state.encryption import Cipher
from herder.talos.documents import load_documents
from herder.talos.siderolink.kernel_args import JoinArgsError, configured, join_args
from herder.talos.siderolink.rejoin import KEY_PURPOSE, Rejoin, admits, is_rejoin_token, rejoin_token
from herder.talos.system_patches import siderolink

NODE = "6f1f4c0e-2b1a-4d8e-9a40-3c1f6a3b9d10"


def test_a_rejoin_token_lets_in_its_machine_only_under_its_key() -> None:
    key = Cipher(os.urandom(32)).derive(KEY_PURPOSE)
    token = rejoin_token(key, NODE)
    assert is_rejoin_token(token) and admits(key, token, NODE) and admits(key, token, NODE.upper())
    assert not admits(key, token, "6f1f4c0e-2b1a-4d8e-9a40-3c1f6a3b9d11")
    assert not admits(Cipher(os.urandom(32)).derive(KEY_PURPOSE), token, NODE)
    assert not is_rejoin_token("hjt_rack_secret")


def test_the_key_is_the_encryption_keys_for_this_purpose_alone() -> None:
    secret = os.urandom(32)
    assert Cipher(secret).derive(KEY_PURPOSE) == Cipher(secret).derive(KEY_PURPOSE)  # every replica's
    assert Cipher(secret).derive(KEY_PURPOSE) not in (secret, Cipher(secret).derive("another purpose"))


def test_the_join_arguments_name_the_api_the_token_and_the_tunnels_sinks() -> None:
    key = os.urandom(32)
    args = Rejoin(key, "https://203.0.113.10:8099", "fdae:41e4:649b:9303::1").args_for(NODE)
    assert args.api == "https://203.0.113.10:8099" and args.token == rejoin_token(key, NODE)
    assert args.events_sink == "[fdae:41e4:649b:9303::1]:8090"
    assert args.kernel_log == "tcp://[fdae:41e4:649b:9303::1]:8092"


def test_a_machine_with_the_config_herder_wrote_joins_as_it_says_rather_than_as_it_booted() -> None:
    """What herder writes into a joined machine's config is what the machine joins with at its next boot
    (Talos prefers its config's SideroLinkConfig and EventSinkConfig to its kernel arguments)."""
    booted = join_args("grpc://198.51.100.4:8099", "hjt_rack_secret", "fdae:41e4:649b:9303::1")
    own = Rejoin(os.urandom(32), "https://203.0.113.10:8099", "fdae:41e4:649b:9303::2").args_for(NODE)
    written = load_documents(siderolink(own.api_url, own.events_sink, own.kernel_log))
    assert configured(written, booted) == own
    assert configured([], booted) == booted  # in maintenance: its kernel arguments
    other = [{"apiVersion": "v1alpha1", "kind": "HostnameConfig", "hostname": "edge-1"}]
    assert configured(other, booted) == booted
    with pytest.raises(JoinArgsError, match=r"siderolink\.api=grpc://198\.51\.100\.4:8099: no \?jointoken="):
        configured([{"kind": "SideroLinkConfig", "apiUrl": "grpc://198.51.100.4:8099"}], booted)
