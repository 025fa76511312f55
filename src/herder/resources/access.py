"""Identity and audit kinds: ServiceAccount, User, Token, TokenDigest and AuditEvent.

A bearer token has two halves in storage. ``Token`` is its public record (whose it is, when it
expires) that admins may list and delete to revoke it; ``TokenDigest``, of the same name, holds
only the SHA-256 digest of the secret, is sealed at rest, and no role may read it through the API.
So listing tokens can never show anything that helps to forge one.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from herder.resources.configuration import GROUP, VERSION
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


# The label Token objects carry naming their subject, so that one account's tokens list cheaply.
TOKEN_SUBJECT_LABEL = "herder.dev/token-subject"

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
    email: str = ""
    display_name: str = Field(default="", alias="displayName")


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
    categories=("herder",),
    printer_columns=(*_IDENTITY_COLUMNS, PrinterColumn("Email", ".spec.email")),
    description="A person with a role; until single sign-on exists, a user authenticates with bearer tokens.",
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

ACCESS_KINDS = (SERVICE_ACCOUNT, USER, TOKEN, TOKEN_DIGEST, AUDIT_EVENT)
