"""Who is writing, as admission checks need to know it: herder itself (a controller, the server), or an
identity of some role. A store write carries its actor's name only; the identity kinds say its role."""

from __future__ import annotations

from herder.resources.access import SERVICE_ACCOUNT, USER
from herder.state.errors import NotFound
from herder.state.store import Store

_IDENTITY_KINDS = {"serviceaccount": SERVICE_ACCOUNT, "user": USER}
# Support's identity holds no object of the account (``herder.api.support``): its name says its role.
_SUPPORT_KIND = "support"


async def writer_role(store: Store, actor: str | None) -> str | None:
    """The role of the identity writing as ``actor`` (``serviceaccount:NAME``, ``user:NAME``, ``support:…``),
    or None when herder itself writes. An identity that no longer exists has no role (``""``)."""
    kind, sep, name = (actor or "").partition(":")
    if sep and kind == _SUPPORT_KIND:
        return "Support"
    info = _IDENTITY_KINDS.get(kind) if sep else None
    if info is None:
        return None
    try:
        identity = await store.get(info.kind, name)
    except NotFound:
        return ""
    return str((identity.spec or {}).get("role") or "")


async def writer_sees_hidden(store: Store, actor: str | None) -> bool:
    """Whether the writer is herder itself or an identity of role Support."""
    return await writer_role(store, actor) in (None, "Support")
