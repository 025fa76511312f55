"""``--listen``-style flags: what ``HOST:PORT`` herder takes, and the form it hands out again."""

from __future__ import annotations

import pytest

from herder.api.serve import parse_listen, server_url


def test_an_address_is_kept_in_its_canonical_form() -> None:
    # gRPC's hostname check compares the URL's text with the certificate's address: a machine told
    # https://[fd24:0ec9::1]:… refused a certificate for fd24:ec9::1.
    assert parse_listen("[fd24:6163:0ec9:a3b5:0::1]:8099", "--siderolink-listen") == (
        "fd24:6163:ec9:a3b5::1",
        8099,
    )
    assert server_url(*parse_listen("[FD00::01]:8443")) == "https://[fd00::1]:8443"
    assert parse_listen("herder.example:8443") == ("herder.example", 8443)
    assert parse_listen(":8443") == ("127.0.0.1", 8443)


@pytest.mark.parametrize("bad", ["8443", "host:", "host:0", "host:65536", "host:http"])
def test_a_malformed_listen_names_its_flag(bad: str) -> None:
    with pytest.raises(ValueError, match=r"^--siderolink-listen .*expected HOST:PORT"):
        parse_listen(bad, "--siderolink-listen")
