"""No self-lockout: the store refuses (409) a write that would leave herder with no Admin able to sign in.

An Admin who can sign in is a ServiceAccount or User of role Admin, not being deleted, with a token that
has not expired. Deleting the last of them, demoting it, or deleting its last token would leave the
server reachable by nobody but Support (a fuzzer deleted the ``admin`` ServiceAccount in its first
minute), so each is refused with the reason and the way out: make another Admin, or issue another
token, first. Whoever writes meets the rule, as with every admission check.
"""

from __future__ import annotations

from datetime import UTC, datetime

from herder.api.tokens import SUBJECT_KINDS
from herder.resources import Resource
from herder.resources.access import SERVICE_ACCOUNT, TOKEN, USER
from herder.state.admission import Admission, Write
from herder.state.errors import Conflict
from herder.state.store import Store

ADMIN = "Admin"


class LastAdmin:
    def __init__(self, store: Store) -> None:
        self._store = store

    def register(self, admission: Admission) -> None:
        admission.register(SERVICE_ACCOUNT.kind, self.identity)
        admission.register(USER.kind, self.identity)
        admission.register(TOKEN.kind, self.token)

    async def identity(self, write: Write) -> None:
        """An Admin deleted or demoted."""
        old = write.old
        if old is None or not _admin(old):
            return
        if write.new is not None and _admin(write.new) and not write.new.metadata.deletion_timestamp:
            return
        signs_in = await self._signing_in()
        if (old.kind, old.name) in signs_in and len(signs_in) == 1:
            doing = "deleting" if write.new is None or write.new.metadata.deletion_timestamp else "demoting"
            raise Conflict(
                f'{old.kind} "{old.name}" is the last Admin that can sign in: {doing} it would leave '
                "nobody to administer herder; make another Admin first "
                "(herder serviceaccount create NAME --role Admin)"
            )

    async def token(self, write: Write) -> None:
        """A token deleted: refused if it is the last Admin's last one."""
        if write.new is not None or write.old is None or not _live(write.old):
            return
        subject = _subject_of(write.old)
        signs_in = await self._signing_in()
        if subject not in signs_in or len(signs_in) > 1 or len(signs_in[subject]) > 1:
            return
        kind, name = subject
        raise Conflict(
            f'Token "{write.old.name}" is the last token of {kind} "{name}", the last Admin that can sign '
            "in: deleting it would leave nobody to administer herder; issue another first "
            f"(herder serviceaccount token {name}), or make another Admin"
        )

    async def _signing_in(self) -> dict[tuple[str, str], list[str]]:
        """The Admins that can sign in, each with the names of its live tokens."""
        admins: dict[tuple[str, str], str] = {}
        for kind in SUBJECT_KINDS.values():
            for identity in (await self._store.list(kind[0])).items:
                if _admin(identity) and not identity.metadata.deletion_timestamp:
                    admins[(identity.kind, identity.name)] = identity.metadata.uid or ""
        out: dict[tuple[str, str], list[str]] = {}
        for token in (await self._store.list(TOKEN)).items:
            subject = _subject_of(token)
            # A token is bound to its subject's uid: one of an account of the same name made before is dead.
            bound = {ref.uid for ref in token.metadata.owner_references}
            if subject in admins and admins[subject] in bound and _live(token):
                out.setdefault(subject, []).append(token.name)
        return out


def _admin(identity: Resource) -> bool:
    return (identity.spec or {}).get("role") == ADMIN


def _subject_of(token: Resource) -> tuple[str, str]:
    spec = token.spec or {}
    return str(spec.get("subjectKind", "")), str(spec.get("subject", ""))


def _live(token: Resource) -> bool:
    expires_at = (token.spec or {}).get("expiresAt")
    return not expires_at or datetime.fromisoformat(expires_at) > datetime.now(UTC)
