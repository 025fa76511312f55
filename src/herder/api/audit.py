"""The audit trail: every mutating request, every request made by Support, and every call through the
Talos API gateway, as it was answered.

Each entry becomes an ``AuditEvent`` (readable by Admin through the API) and a JSON line appended to
``audit.log`` in the data directory. Requests that never authenticated go to the file only, so that
anonymous callers cannot fill the store. Entries hold who, what and the outcome, never a request
body, a query string or a header, so no secret can reach the trail. Support's requests on hidden
objects are shown to admins, who may not know those objects, without the object's name. The stored
events are kept within an age and a count by ``audit_retention``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from herder.krm.policy import Access, Identity
from herder.resources import Resource
from herder.resources.access import AUDIT_EVENT
from herder.resources.audit_labels import (
    AUDIT_KIND_LABEL,
    AUDIT_NAME_LABEL,
    AUDIT_USER_LABEL,
    AUDIT_VERB_LABEL,
    audit_label_value,
)
from herder.state.errors import StateError
from herder.state.store import SYSTEM, Store

log = logging.getLogger(__name__)

# What audit events readable by admins say instead of a hidden object's name.
HIDDEN_NAME = "(hidden)"
MUTATING_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def _by_support(who: Identity | None) -> bool:
    """Whether Support made a request, as itself or as someone it impersonates."""
    return who is not None and (who.role == "Support" or bool(who.impersonator))


def audited(who: Identity | None, access: Access | None, method: str) -> bool:
    """Whether a request is recorded: it changes something, or Support made it."""
    if _by_support(who):
        return True
    verb = access.verb if access is not None else ""
    return verb in MUTATING_VERBS or (access is None and method not in ("GET", "HEAD", "OPTIONS"))


class AuditLog:
    """Writes audit entries to the store and to ``audit.log``."""

    def __init__(self, store: Store, path: Path, on_stored: Callable[[], None] | None = None) -> None:
        self._store = store
        self._path = path
        self._on_stored = on_stored
        self._file = open(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "a", encoding="utf-8")  # noqa: SIM115
        self._lock = asyncio.Lock()

    def close(self) -> None:
        self._file.close()

    async def record(
        self,
        who: Identity | None,
        access: Access | None,
        *,
        method: str,
        source: str,
        user_agent: str,
        code: int,
        message: str = "",
        conceal: frozenset[str] = frozenset(),
        always: bool = False,
        changed: bool = True,
    ) -> None:
        """Record one answered request; the names in ``conceal`` (of hidden objects) are kept out of
        the store's event, as its name, its namespace or in its message. ``always``: whatever the verb
        (every call through the Talos API gateway is recorded). ``changed``: False for a write that
        found the object already as asked; it stored nothing, so neither does its entry (``audit.log``
        has it), unless Support made it (everything Support does is stored)."""
        if not (always or audited(who, access, method)):
            return
        if not changed and code < 400:
            message = message or "unchanged: the object was already as asked, nothing was written"
        now = datetime.now(UTC)
        spec: dict[str, Any] = {
            "time": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "user": who.name if who else "",
            "impersonator": who.impersonator if who else "",
            "role": who.role if who else "",
            "verb": access.verb if access else method.lower(),
            "apiVersion": access.kind.api_version if access else "",
            "kind": access.kind.kind if access else "",
            "namespace": (access.namespace or "") if access else "",
            "name": (access.name or "") if access else "",
            "subresource": (access.subresource or "") if access else "",
            "code": code,
            "result": "Success" if code < 400 else "Failure",
            "message": message[:1024],
            "sourceAddress": source,
            "userAgent": user_agent[:256],
        }
        async with self._lock:
            self._file.write(json.dumps(spec, separators=(",", ":")) + "\n")
            self._file.flush()
        if who is None or not (changed or _by_support(who)):
            return
        if conceal:
            # The file is the operator's; the store's events are read by admins, who may not know the names.
            for hidden in sorted(conceal, key=len, reverse=True):
                message = message.replace(hidden, HIDDEN_NAME)
            spec = {
                **spec,
                "name": HIDDEN_NAME if spec["name"] in conceal else spec["name"],
                "namespace": HIDDEN_NAME if spec["namespace"] in conceal else spec["namespace"],
                "message": message[:1024],
            }
        try:
            await self._store.create(self._event(now, spec), actor=SYSTEM)
        except StateError:
            # The request is already answered; a lost store entry must not fail it (the file has it).
            log.exception("could not store an audit event; audit.log has it")
            return
        if self._on_stored is not None:
            self._on_stored()

    @staticmethod
    def _event(now: datetime, spec: dict[str, Any]) -> Resource:
        # Names sort by time, so a list of audit events comes back oldest first.
        name = f"{now.strftime('%Y%m%d-%H%M%S-%f')}-{secrets.token_hex(3)}"
        labels = {
            label: value
            for label, text in (
                (AUDIT_KIND_LABEL, spec["kind"]),
                (AUDIT_NAME_LABEL, spec["name"]),
                (AUDIT_VERB_LABEL, spec["verb"]),
                (AUDIT_USER_LABEL, spec["user"]),
            )
            if (value := audit_label_value(text)) is not None
        }
        return Resource.model_validate(
            {
                "apiVersion": AUDIT_EVENT.api_version,
                "kind": AUDIT_EVENT.kind,
                "metadata": {"name": name, "labels": labels},
                "spec": spec,
            }
        )
