"""Secrets taken out of text herder keeps or hands out (machine logs, support bundles): the secrets of a
cluster that herder knows — its bundle's tokens, encryption secrets and CA and service account keys, in
every form a Talos config or a program prints them (PEM, base64 of PEM, the lines of a PEM body) — and
whatever looks like a secret of any cluster: private key blocks, base64 of them, bootstrap-style tokens
(``[a-z0-9]{6}.[a-z0-9]{16}``), herder's bearer tokens (``hdr_NAME_SECRET``), ``Bearer`` credentials and
SideroLink join tokens (``jointoken=…`` of a kernel command line, as a joined machine's kernel prints it).

A ``Redactor`` works on whole texts; a ``LineRedactor`` on the lines of one log as they come, carrying a
private key block that spans lines from one line to the next.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable

from herder.talos.secrets import SecretsBundle

REDACTED = "<redacted>"
"""What stands in for a secret (a plain YAML scalar: a redacted config still parses)."""
MIN_SECRET = 8
"""Shorter strings are never matched as secrets (they would match by chance)."""

_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]*PRIVATE KEY)-----.*?(?:-----END \1-----|\Z)", re.DOTALL)
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY-----")
# base64 of "-----BEGIN ": a PEM in a Talos config or a kubeconfig, decoded to see whether it is a key.
_B64_PEM = re.compile(r"LS0tLS1CRUdJTi[A-Za-z0-9+/=]+")
_TOKEN = re.compile(r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b")
_HERDER_TOKEN = re.compile(r"\bhdr_[A-Za-z0-9.-]+_[0-9a-f]{64}\b")
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
_JOIN_TOKEN = re.compile(r"\b(jointoken=)[^&\s\"']+")


def bundle_secrets(bundle: SecretsBundle) -> list[str]:
    """Every secret string of a cluster's bundle, in the forms it is written in."""
    found = [
        bundle.cluster_secret,
        bundle.bootstrap_token,
        bundle.trustd_token,
        bundle.secretbox_encryption_secret,
        bundle.aescbc_encryption_secret,
    ]
    for key in (
        bundle.etcd.key,
        bundle.k8s.key,
        bundle.k8s_aggregator.key,
        bundle.os.key,
        bundle.k8s_service_account_key,
    ):
        found.extend(key_forms(key))
    return [s for s in found if len(s) >= MIN_SECRET]


def key_forms(pem: bytes) -> list[str]:
    """A PEM private key as it may be printed: base64 of the whole PEM (Talos configs), and each line of
    its body (the PEM itself, over several lines)."""
    text = pem.decode("ascii", "replace")
    body = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("-----")]
    return [base64.b64encode(pem).decode("ascii"), *(line for line in body if len(line) >= 16)]


def _key_in_base64(match: re.Match[str]) -> str:
    raw = match.group(0)
    try:
        decoded = base64.b64decode(raw + "=" * (-len(raw) % 4))
    except (binascii.Error, ValueError):
        return raw
    return REDACTED if b"PRIVATE KEY" in decoded else raw


class Redactor:
    """Takes ``secrets`` (and whatever looks like a secret) out of texts."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first, so that a secret containing another is taken out whole. Substring tests, not a
        # regular expression: compiling an alternation of a cluster's keys costs more than a fleet's lines.
        self._known = sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._known:
            if secret in text:
                text = text.replace(secret, REDACTED)
        text = _PEM_BLOCK.sub(
            lambda m: f"-----BEGIN {m.group(1)}-----{REDACTED}-----END {m.group(1)}-----", text
        )
        if "LS0tLS1CRUdJTi" in text:
            text = _B64_PEM.sub(_key_in_base64, text)
        if "." in text:
            text = _TOKEN.sub(REDACTED, text)
        if "hdr_" in text:
            text = _HERDER_TOKEN.sub(REDACTED, text)
        if "jointoken=" in text:
            text = _JOIN_TOKEN.sub(lambda m: m.group(1) + REDACTED, text)
        return _BEARER.sub(lambda m: m.group(1) + REDACTED, text)


class LineRedactor:
    """A ``Redactor`` over the lines of one log: the body of a private key printed over several lines is
    taken out line by line until its end."""

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self._in_key = False

    def __call__(self, line: str) -> str:
        if self._in_key:
            end = _PEM_END.search(line)
            if end is None:
                return REDACTED
            self._in_key = False
            return REDACTED + self.redactor(line[end.start() :])
        begin = _PEM_BEGIN.search(line)
        if begin is not None and not _PEM_END.search(line, begin.end()):
            self._in_key = True
            return self.redactor(line[: begin.start()]) + begin.group(0) + REDACTED
        return self.redactor(line)
