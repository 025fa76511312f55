"""The labels audit events carry, which filter them (``herder audit --kind …``, ``describe``): light, for
the commands that look for events without loading the kinds' models."""

from __future__ import annotations

import re

AUDIT_KIND_LABEL = "herder.dev/audit-kind"
AUDIT_NAME_LABEL = "herder.dev/audit-name"
AUDIT_VERB_LABEL = "herder.dev/audit-verb"
AUDIT_USER_LABEL = "herder.dev/audit-user"
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")


def audit_label_value(text: str) -> str | None:
    """``text`` as the value of an audit label (``:`` becomes ``.``), or None when it cannot be one."""
    value = text.replace(":", ".")
    return value if _LABEL_VALUE.match(value) else None
