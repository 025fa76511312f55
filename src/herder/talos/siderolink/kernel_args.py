"""The kernel arguments that make a Talos machine join a management plane over SideroLink, as Talos reads
them (``pkg/machinery/constants``): ``siderolink.api=URL?jointoken=TOKEN``, ``talos.events.sink=[ADDR]:PORT``
and ``talos.logging.kernel=tcp://[ADDR]:PORT``; the last two name the server's address inside the tunnel.
A machine's config may say the same in documents (``SideroLinkConfig``, ``EventSinkConfig``,
``KmsgLogConfig``), which Talos prefers to its kernel arguments.
"""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

API_ARG = "siderolink.api"
EVENTS_SINK_ARG = "talos.events.sink"
KERNEL_LOG_ARG = "talos.logging.kernel"
EVENTS_PORT = 8090
"""Omni's port for the events sink, inside the tunnel."""
KERNEL_LOG_PORT = 8092
"""Omni's port for the kernel log, inside the tunnel."""


class JoinArgsError(ValueError):
    """Kernel arguments that do not say how to join, with the reason."""


@dataclass(frozen=True)
class JoinArgs:
    api: str
    """Where the Provision API is: ``grpc://HOST:PORT`` (plaintext) or ``https://HOST:PORT``."""
    token: str
    events_sink: str = ""
    kernel_log: str = ""

    @property
    def target(self) -> str:
        """HOST:PORT of the Provision API (a gRPC target)."""
        parts = urlsplit(self.api)
        return parts.netloc

    @property
    def secure(self) -> bool:
        return urlsplit(self.api).scheme == "https"

    @property
    def api_url(self) -> str:
        """``siderolink.api``'s value: the Provision API with the token (``SideroLinkConfig.apiUrl`` too)."""
        return f"{self.api}?{urlencode({'jointoken': self.token})}"

    def kernel_args(self) -> list[str]:
        args = [f"{API_ARG}={self.api_url}"]
        if self.events_sink:
            args.append(f"{EVENTS_SINK_ARG}={self.events_sink}")
        if self.kernel_log:
            args.append(f"{KERNEL_LOG_ARG}={self.kernel_log}")
        return args


def join_args(api: str, token: str, server_address: str) -> JoinArgs:
    """The kernel arguments of a machine joining the Provision API ``api`` with ``token``, sending its
    events and kernel log to the server at ``server_address`` in the tunnel, on Omni's ports."""
    host = f"[{ipaddress.ip_address(server_address)}]"
    return JoinArgs(api, token, f"{host}:{EVENTS_PORT}", f"tcp://{host}:{KERNEL_LOG_PORT}")


def parse(command_line: str | list[str]) -> JoinArgs:
    """The join arguments of a kernel command line (a string, or the arguments one by one)."""
    words = shlex.split(command_line) if isinstance(command_line, str) else command_line
    values: dict[str, str] = {}
    for word in words:
        name, sep, value = word.partition("=")
        if sep and name in (API_ARG, EVENTS_SINK_ARG, KERNEL_LOG_ARG):
            values[name] = value
    url = values.get(API_ARG)
    if not url:
        raise JoinArgsError(f"{API_ARG}=URL?jointoken=TOKEN is missing from the kernel arguments")
    parts = urlsplit(url)
    if parts.scheme not in ("grpc", "https") or not parts.hostname or parts.port is None:
        raise JoinArgsError(f"{API_ARG}={url}: expected grpc://HOST:PORT or https://HOST:PORT")
    tokens = parse_qs(parts.query).get("jointoken") or []
    if not tokens or not tokens[0]:
        raise JoinArgsError(f"{API_ARG}={url}: no ?jointoken=")
    return JoinArgs(
        f"{parts.scheme}://{parts.netloc}",
        tokens[0],
        values.get(EVENTS_SINK_ARG, ""),
        values.get(KERNEL_LOG_ARG, ""),
    )


_CONFIG_DOCUMENTS = (
    ("SideroLinkConfig", "apiUrl", API_ARG),
    ("EventSinkConfig", "endpoint", EVENTS_SINK_ARG),
    ("KmsgLogConfig", "url", KERNEL_LOG_ARG),
)


def configured(documents: Iterable[Any], booted: JoinArgs) -> JoinArgs:
    """How a machine booted with ``booted`` joins once it has a config of these documents: what the config
    says wins, as Talos's SideroLink and event sink controllers pick it (so a machine that joined with a
    token herder no longer admits rejoins with the one herder wrote into its config). Talos sends its
    kernel log to every destination it is given, the config's and the kernel arguments'; this names one,
    the config's (herder's configs name the same as their kernel arguments). Raises ``JoinArgsError`` for
    a SideroLinkConfig that says no token."""
    typed = {str(d.get("kind")): d for d in documents if isinstance(d, dict) and "kind" in d}
    words = booted.kernel_args()
    for kind, key, arg in _CONFIG_DOCUMENTS:
        value = (typed.get(kind) or {}).get(key)
        if value:
            words.append(f"{arg}={value}")
    return parse(words)
