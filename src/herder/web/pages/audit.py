"""The Audit log page (Admin and Support, as the API allows): who did what, when, from where, filtered
by who, kind, verb and time. Filters on who, kind and verb are the audit events' labels, so the API
selects them; the time filter keeps the events at or after the time given."""

from __future__ import annotations

from datetime import datetime

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from herder.resources.audit_labels import (
    AUDIT_KIND_LABEL,
    AUDIT_USER_LABEL,
    AUDIT_VERB_LABEL,
    audit_label_value,
)
from herder.web.caller import Caller
from herder.web.pages import revision
from herder.web.site import Web
from herder.web.views import BadInput

SHOWN = 200
FILTERS = {"user": AUDIT_USER_LABEL, "kind": AUDIT_KIND_LABEL, "verb": AUDIT_VERB_LABEL}


def since(text: str) -> str:
    """An RFC 3339 time (or a date, or a datetime-local input's value) in the form events are stamped."""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).isoformat()
    except ValueError:
        raise BadInput(f"since: {text!r} is not a time (expected e.g. 2026-12-01T09:00)") from None


def routes(web: Web) -> list[BaseRoute]:
    async def audit(request: Request, caller: Caller) -> Response:
        query = request.query_params
        chosen = {key: query.get(key, "").strip() for key in (*FILTERS, "since")}
        terms = []
        for key, label in FILTERS.items():
            if chosen[key]:
                value = audit_label_value(chosen[key])
                if value is None:
                    raise BadInput(f"{key}: {chosen[key]!r} is not a name audit events are filtered by")
                terms.append(f"{label}={value}")
        selector = ",".join(terms)
        listed = await caller.client.list("auditevents", label_selector=selector or None)
        events = listed.items
        if chosen["since"]:
            start = since(chosen["since"])
            events = [e for e in events if str((e.spec or {}).get("time", "")) >= start]
        events = sorted(events, key=lambda e: str((e.spec or {}).get("time", "")), reverse=True)
        context = {
            "events": events[:SHOWN],
            "total": len(events),
            "filters": chosen,
            "watch": ["auditevents"],
            "rv": revision(listed),
        }
        return web.render(request, "audit.html", context, caller=caller)

    return [Route("/audit", web.page(audit), methods=["GET"])]
