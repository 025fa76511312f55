"""A disabled User's credentials go: its tokens are deleted (and with them, by the garbage collector, the
web UI sessions acting with them), so that enabling the User again brings none of them back.

Nothing waits on this to lock the person out: while a User is disabled no token of theirs authenticates
(``herder.api.tokens``), so their requests, pages and proxied streams end at the next check.
"""

from __future__ import annotations

from herder.resources.access import TOKEN, TOKEN_SUBJECT_UID_LABEL, USER
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch
from herder.runtime.outputs import Writes


class DisabledUserController(Controller):
    name = "DisabledUser"
    primary = USER.kind
    outputs = (Writes(TOKEN.kind, deletes=True),)
    watches = (Watch(USER.kind),)

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        user = await ctx.get(key)
        if user is None or not (user.spec or {}).get("disabled") or not user.metadata.uid:
            return None
        for token in await ctx.list(
            TOKEN.kind, label_selector=f"{TOKEN_SUBJECT_UID_LABEL}={user.metadata.uid}"
        ):
            await ctx.delete(ObjectKey(TOKEN.kind, None, token.name))
        return None
