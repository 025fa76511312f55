"""Identity and audit kinds: ServiceAccount, User, RoleRule, Token, TokenDigest, WebSession and AuditEvent.

A ``User`` is a person, made at their first sign-in through the identity provider (OpenID Connect) and
named by their verified email (or the provider's ``sub`` where there is none); the groups the provider
says they are in become labels (``group_label``) that AccessPolicy label selectors and ``RoleRule``
selectors select. A RoleRule gives the people its selector matches a role at every sign-in.

A bearer token has two halves in storage. ``Token`` is its public record (whose it is, when it
expires) that admins may list and delete to revoke it; ``TokenDigest``, of the same name, holds
only the SHA-256 digest of the secret, is sealed at rest, and no role may read it through the API.
So listing tokens can never show anything that helps to forge one.
"""

from __future__ import annotations

import hashlib
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from herder.resources.configuration import GROUP, VERSION
from herder.resources.machines import LabelSelectorSpec
from herder.resources.object import Resource
from herder.resources.registry import KindInfo, PrinterColumn

# The roles of DESIGN §7, weakest first; InfraProvider and Support stand outside the ladder. None sees
# nothing but the clusters the AccessPolicy grants it.
Role = Literal["None", "Reader", "Operator", "Admin", "InfraProvider", "Support"]
ROLES: tuple[Role, ...] = ("None", "Reader", "Operator", "Admin", "InfraProvider", "Support")
# The Talos role each role holds on the Talos API of its clusters' machines (InfraProvider holds none).
TALOS_ROLES: dict[str, str] = {
    "Reader": "os:reader",
    "Operator": "os:operator",
    "Admin": "os:admin",
    "Support": "os:admin",
}

# The Kubernetes group herder's proxy gives a Reader without a rule's groups: herder binds it to ClusterRole
# ``view`` in every cluster it makes (READERS_BINDING, applied by Talos from the control planes' configs).
READERS_GROUP = "herder:readers"
READERS_BINDING = f"""apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {READERS_GROUP}
  labels: {{app.kubernetes.io/managed-by: herder}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}}
subjects:
- {{apiGroup: rbac.authorization.k8s.io, kind: Group, name: "{READERS_GROUP}"}}
"""

# The label that scopes objects to one infra provider, and an InfraProvider identity to its objects.
INFRA_PROVIDER_LABEL = "herder.dev/infra-provider-id"
# herder's own names, as Kubernetes keeps "kube-": hidden objects bear them, and no user creates one.
RESERVED_PREFIX = "herder-"
# Objects carrying this label do not exist for roles below Support.
HIDDEN_LABEL = "herder.dev/hidden"
# Objects carrying this annotation are visible, but nobody below Support may change or act on them.
READ_ONLY_ANNOTATION = "herder.dev/read-only"


def read_only_of(obj: Resource) -> dict[str, str]:
    """The read-only annotation of ``obj``, to carry onto what is made of it: a managed
    control plane's machine set makes read-only nodes, a read-only node a read-only cluster machine."""
    value = obj.metadata.annotations.get(READ_ONLY_ANNOTATION)
    return {READ_ONLY_ANNOTATION: value} if value is not None else {}


# The label Token objects carry naming their subject, so that one account's tokens list cheaply (when the
# name is a label value: a person's email is not, so tokens carry their subject's uid too).
TOKEN_SUBJECT_LABEL = "herder.dev/token-subject"
TOKEN_SUBJECT_UID_LABEL = "herder.dev/token-subject-uid"

# A person's groups (the identity provider's groups claim) are labels ``groups.herder.dev/NAME: "true"``.
GROUP_LABEL_PREFIX = "groups.herder.dev/"
GROUP_LABEL_VALUE = "true"
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def group_label(group: str) -> str:
    """The label key a person in ``group`` carries: ``groups.herder.dev/GROUP`` when the group's name is a
    valid label name (at most 63 letters, digits, ``-``, ``_`` and ``.``, beginning and ending with a letter
    or digit); otherwise its name made one (lowercase, other characters as ``-``, cut to 54) and the first 8
    hex digits of its SHA-256, so that no two groups share a label: ``/Platform Team`` →
    ``groups.herder.dev/platform-team-e650fd31``. A User's ``status.groups`` lists each group's label."""
    if _LABEL_NAME.match(group):
        return GROUP_LABEL_PREFIX + group
    slug = re.sub(r"[^a-z0-9]+", "-", group.lower()).strip("-")[:54].strip("-")
    digest = hashlib.sha256(group.encode()).hexdigest()[:8]
    return f"{GROUP_LABEL_PREFIX}{slug or 'group'}-{digest}"


# AuditEvents are labelled by object, verb and user: herder.resources.audit_labels.
_STRICT = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)


class IdentitySpec(BaseModel):
    """What a ServiceAccount or a User may do: one role, and the provider id an InfraProvider acts for."""

    model_config = _STRICT

    role: Role = Field(description="None, Reader, Operator, Admin, InfraProvider or Support")
    provider_id: str | None = Field(
        default=None, alias="providerId", description="the infra provider id; required for role InfraProvider"
    )
    description: str = ""

    @model_validator(mode="after")
    def _provider_id_iff_infra_provider(self) -> IdentitySpec:
        if self.role == "InfraProvider" and not self.provider_id:
            raise ValueError("providerId is required for role InfraProvider")
        if self.role != "InfraProvider" and self.provider_id:
            raise ValueError("providerId is only meaningful for role InfraProvider")
        return self


class UserSpec(IdentitySpec):
    """A person: their role (``None`` until an Admin or a RoleRule gives more), and whether they may
    sign in at all."""

    role: Role = Field(default="None", description="None, Reader, Operator or Admin (default None)")
    disabled: bool = Field(
        default=False, description="true: the person cannot sign in, and every session and credential ends"
    )
    email: str = ""
    display_name: str = Field(default="", alias="displayName")


class UserGroup(BaseModel):
    model_config = _STRICT

    name: str = Field(description="the group as the identity provider names it")
    label: str = Field(description='the label the User carries for it (value "true")')


class UserStatus(BaseModel):
    """What the identity provider said at the person's last sign-in (written by herder's sign-in only)."""

    model_config = _STRICT

    issuer: str = ""
    subject: str = Field(default="", description="the provider's sub")
    email_verified: bool = Field(default=False, alias="emailVerified")
    groups: list[UserGroup] = []
    role_rules: list[str] = Field(
        default=[], alias="roleRules", description="the RoleRules that gave spec.role at the last sign-in"
    )
    last_sign_in_time: str = Field(default="", alias="lastSignInTime")


RuleRole = Literal["None", "Reader", "Operator", "Admin"]


class RoleRuleSpec(BaseModel):
    """People whose labels ``selector`` matches get ``role`` at every sign-in (the highest rule wins)."""

    model_config = _STRICT

    selector: LabelSelectorSpec = Field(
        description="over a User's labels (groups.herder.dev/…); {} matches all"
    )
    role: RuleRole
    description: str = ""


class WebSessionSpec(BaseModel):
    """One browser's session of the web UI, or a sign-in through the identity provider under way
    (``pending``). Named by the SHA-256 of the id in the browser's cookie, so nothing stored can be
    presented as one."""

    model_config = _STRICT

    token: str = Field(default="", description="the herder bearer token the session acts with")
    csrf: str = ""
    created_at: str = Field(alias="createdAt")
    used_at: str = Field(alias="usedAt")
    expires_at: str = Field(alias="expiresAt", description="the absolute end of the session")
    id_token: str = Field(
        default="", alias="idToken", description="the provider's ID token (to sign out there)"
    )
    messages: list[str] = Field(default=[], description="what the next page shows once")
    pending: dict[str, str] | None = Field(
        default=None, description="a sign-in under way: state, nonce, PKCE verifier, redirect URI"
    )


class TokenSpec(BaseModel):
    model_config = _STRICT

    subject_kind: Literal["ServiceAccount", "User"] = Field(alias="subjectKind")
    subject: str = Field(min_length=1, description="the name of the ServiceAccount or User")
    expires_at: str | None = Field(default=None, alias="expiresAt", description="RFC 3339; none: never")
    description: str = ""


class TokenDigestSpec(BaseModel):
    model_config = _STRICT

    sha256: str = Field(pattern="^[0-9a-f]{64}$", description="hex SHA-256 of the token's secret")


class AuditEventSpec(BaseModel):
    """One request as it was answered; written by the server only."""

    model_config = _STRICT

    time: str = Field(description="RFC 3339 with microseconds, UTC")
    user: str = Field(description="the identity, as Kind/name; empty when the caller was not authenticated")
    impersonator: str = Field(default="", description="who acted as ``user`` through impersonation")
    role: str = ""
    verb: str
    api_version: str = Field(default="", alias="apiVersion")
    kind: str = ""
    namespace: str = ""
    name: str = ""
    subresource: str = ""
    code: int = Field(description="the HTTP status code of the answer")
    result: Literal["Success", "Failure"]
    message: str = ""
    source_address: str = Field(default="", alias="sourceAddress")
    user_agent: str = Field(default="", alias="userAgent")


_IDENTITY_COLUMNS = (
    PrinterColumn("Role", ".spec.role"),
    PrinterColumn("Provider", ".spec.providerId"),
    PrinterColumn("Description", ".spec.description", priority=1),
)

SERVICE_ACCOUNT = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="ServiceAccount",
    plural="serviceaccounts",
    namespaced=False,
    spec_model=IdentitySpec,
    short_names=("sa",),
    categories=("herder",),
    printer_columns=_IDENTITY_COLUMNS,
    description="A non-human identity with a role; it authenticates with bearer tokens.",
)

USER = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="User",
    plural="users",
    namespaced=False,
    spec_model=UserSpec,
    status_model=UserStatus,
    categories=("herder",),
    printer_columns=(
        PrinterColumn("Role", ".spec.role"),
        PrinterColumn("Disabled", ".spec.disabled", type="boolean"),
        PrinterColumn("Last-Sign-In", ".status.lastSignInTime"),
        PrinterColumn("Email", ".spec.email", priority=1),
    ),
    names="path-segment",
    description="A person, made at their first sign-in through the identity provider and named by their "
    "verified email; labelled with their groups (groups.herder.dev/NAME).",
)

ROLE_RULE = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="RoleRule",
    plural="rolerules",
    namespaced=False,
    spec_model=RoleRuleSpec,
    categories=("herder",),
    printer_columns=(
        PrinterColumn("Role", ".spec.role"),
        PrinterColumn("Description", ".spec.description", priority=1),
    ),
    description="Gives the people its selector matches a role at every sign-in; the highest matching rule wins.",
)

WEB_SESSION = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="WebSession",
    plural="websessions",
    namespaced=False,
    spec_model=WebSessionSpec,
    sensitive=True,
    description="A browser's session of the web UI; never readable through the API.",
)

TOKEN = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="Token",
    plural="tokens",
    namespaced=False,
    spec_model=TokenSpec,
    categories=("herder",),
    printer_columns=(
        PrinterColumn("Subject-Kind", ".spec.subjectKind"),
        PrinterColumn("Subject", ".spec.subject"),
        PrinterColumn("Expires", ".spec.expiresAt"),
    ),
    description="The public record of one bearer token; delete it to revoke the token.",
)

TOKEN_DIGEST = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="TokenDigest",
    plural="tokendigests",
    namespaced=False,
    spec_model=TokenDigestSpec,
    sensitive=True,
    description="The digest of a bearer token's secret; never readable through the API.",
)

AUDIT_EVENT = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="AuditEvent",
    plural="auditevents",
    namespaced=False,
    spec_model=AuditEventSpec,
    short_names=("audit",),
    categories=("herder",),
    printer_columns=(
        PrinterColumn("Time", ".spec.time"),
        PrinterColumn("User", ".spec.user"),
        PrinterColumn("Impersonator", ".spec.impersonator"),
        PrinterColumn("Role", ".spec.role"),
        PrinterColumn("Verb", ".spec.verb"),
        PrinterColumn("Kind", ".spec.kind"),
        PrinterColumn("Namespace", ".spec.namespace"),
        PrinterColumn("Object", ".spec.name"),
        PrinterColumn("Code", ".spec.code", type="integer"),
        PrinterColumn("Source", ".spec.sourceAddress", priority=1),
        PrinterColumn("Message", ".spec.message", priority=1),
    ),
    description="Who did what, when and from where; append-only, written by the server.",
)

ACCESS_KINDS = (SERVICE_ACCOUNT, USER, ROLE_RULE, TOKEN, TOKEN_DIGEST, WEB_SESSION, AUDIT_EVENT)
