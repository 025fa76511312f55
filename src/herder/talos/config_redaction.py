"""A Talos machine config with its secrets redacted, and the diff of two such configs: what herder shows
of the configs it applied (``herder machine config-history``), which must not hand out keys or tokens.

Redacted are the secrets Talos's own ``Redact`` hides (the machine and cluster tokens, the cluster secret,
the encryption secrets, every CA's and the service account's private key) and, wherever they are, the
values of fields whose names say they hold a secret (``…key`` but a public one, ``…token``, ``…secret``,
``…password``, a registry's ``auth``), so that a secret a user patch carries is hidden too.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

import yaml

from herder.talos.documents import dump_documents, load_documents

REDACTED = "******"
_SECRET_NAME = re.compile(r"(?i)(key|token|secret|password|passphrase|credentials)$")
_PUBLIC = frozenset({"publickey", "publickeys"})
_SECRET_NAMES = frozenset({"auth", "identitytoken", "bootstraptoken"})


def _secret(name: str) -> bool:
    lowered = name.lower()
    return lowered not in _PUBLIC and (lowered in _SECRET_NAMES or bool(_SECRET_NAME.search(name)))


def _redact(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: (REDACTED if isinstance(k, str) and _secret(k) and _filled(v) else _redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_redact(v) for v in value]
    return value


def _filled(value: Any) -> bool:
    """Whether a secret's value is there to hide (an empty one says nothing)."""
    return value not in (None, "", [], {})


def redact_config(text: str) -> str:
    """The config (one or more YAML documents) with every secret replaced by ``******``; a text that is not
    YAML is redacted whole, since nothing in it can be told apart."""
    try:
        documents = load_documents(text)
    except yaml.YAMLError:
        return REDACTED
    return dump_documents(_redact(d) for d in documents)


def config_diff(
    before: str, after: str, *, old: str = "previous", new: str = "applied"
) -> tuple[str, int, int]:
    """The unified diff of two (redacted) configs, and how many lines it adds and removes."""
    lines = list(difflib.unified_diff(before.splitlines(), after.splitlines(), old, new, lineterm="", n=3))
    added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
    return "\n".join(lines), added, removed
