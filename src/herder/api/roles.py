"""Roles and the per-kind policy table: which role may use which verb on which kind.

Reader < Operator < Admin is the ladder inside an account; Support (platform staff) stands above
Admin, so it may do whatever any role may do, and sees hidden objects. InfraProvider stands outside
the ladder: it may only do what a kind's ``InfraScope`` grants, and only to objects labelled with its
own provider id. A verb whose minimum role is ``None`` is refused to everyone through the API: only
herder itself (controllers, the server) does it.

The table is data, so the authorization matrix test can try every role, kind and verb against it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from herder.krm.policy import Access
from herder.resources import KindInfo
from herder.resources.access import HIDDEN_LABEL, INFRA_PROVIDER_LABEL, RESERVED_PREFIX, Role
from herder.resources.clusters import (
    IMPORT_ABORTED_ANNOTATION,
    IMPORTED_ANNOTATION,
    LOCKED_ANNOTATION,
    MANAGED_BY_ANNOTATION,
)
from herder.resources.machines import FORCE_RELEASE_ANNOTATION
from herder.resources.manifests import SKIP_PRE_CHECKS_ANNOTATION, SYNC_REQUESTED_ANNOTATION
from herder.resources.provisioning import MACHINE_REQUEST_LABEL, MACHINE_REQUEST_SET_LABEL

RANK: dict[str, int] = {"Reader": 1, "Operator": 2, "Admin": 3, "Support": 4}
READ_VERBS = frozenset({"get", "list", "watch"})
UPDATE_VERBS = frozenset({"update", "patch"})
DELETE_VERBS = frozenset({"delete", "deletecollection"})
WRITE_VERBS = frozenset({"create", "update", "patch"}) | DELETE_VERBS
ALL_VERBS = READ_VERBS | WRITE_VERBS
# The subresource through which a bearer token is issued for a ServiceAccount or a User.
TOKEN_SUBRESOURCE = "token"

# Names herder keeps for itself, as Kubernetes keeps "kube-": below Support no object is created with
# such a name or in a namespace so named, and only objects so named may be hidden. A create below
# Support therefore never meets a hidden object, and cannot tell that one exists by failing.
HERDER_PREFIX = "herder.dev/"
# The herder.dev/ labels users may set themselves: the ones that target or scope an object.
USER_SETTABLE_LABELS = frozenset(
    {
        INFRA_PROVIDER_LABEL,
        "herder.dev/cluster",
        "herder.dev/machine-set",
        "herder.dev/cluster-machine",
        "herder.dev/machine",
    }
)
# herder.dev/ annotations users may set: the mark of objects a cluster template made.
USER_SETTABLE_ANNOTATIONS = frozenset({MANAGED_BY_ANNOTATION})
# herder.dev/ annotations a role may set: an Admin lets an unreachable machine go without a reset.
# An Operator of a cluster locks it, asks for a manifest sync now, or lets a Kubernetes upgrade past its
# pre-checks (every write is audited).
ROLE_SETTABLE_ANNOTATIONS: dict[str, Role] = {
    FORCE_RELEASE_ANNOTATION: "Admin",
    SYNC_REQUESTED_ANNOTATION: "Operator",
    SKIP_PRE_CHECKS_ANNOTATION: "Operator",
    LOCKED_ANNOTATION: "Operator",
    # An Admin imports a running cluster (herder cluster import), whose secrets herder then does not make.
    IMPORTED_ANNOTATION: "Admin",
    # Deleting it then leaves its machines as they run (herder cluster import --abort).
    IMPORT_ABORTED_ANNOTATION: "Admin",
}


@dataclass(frozen=True)
class InfraScope:
    """What an InfraProvider may do to a kind: ``verbs`` on the objects whose ``label`` is its id."""

    verbs: frozenset[str]
    status: bool = False
    label: str = INFRA_PROVIDER_LABEL
    # What an update may change (dotted paths, e.g. metadata.finalizers); None: anything.
    fields: frozenset[str] | None = None
    # The top-level status fields a status write may change; None: any.
    status_fields: frozenset[str] | None = None
    # The herder.dev/ labels the provider may set; None: those users may.
    labels: frozenset[str] | None = None


@dataclass(frozen=True)
class Rule:
    """The weakest role allowed each verb of one kind (``None``: nobody through the API)."""

    read: Role | None = "Reader"
    create: Role | None = "Operator"
    update: Role | None = "Operator"
    delete: Role | None = "Operator"
    status: Role | None = None
    token: Role | None = None
    infra: InfraScope | None = None
    # Object actions (``herder.api.actions``) by name, with the weakest role that may run each.
    actions: Mapping[str, Role] = field(default_factory=dict)
    # herder.dev/ labels users may set elsewhere but that herder keeps on this kind.
    owned_labels: frozenset[str] = frozenset()
    # Fields (dotted paths) only Admin and up, and the provider the object is scoped to, may read: the
    # API leaves them out of what others get.
    confidential: tuple[str, ...] = ()
    # Fields (dotted paths) naming another object: one naming a reserved name (where hidden objects live)
    # is left out for those who do not see hidden objects, so that a visible object never names one.
    references: tuple[str, ...] = ()

    def minimum(self, verb: str, subresource: str | None = None) -> Role | None:
        if subresource is not None and subresource in self.actions:
            return self.actions[subresource] if verb == "create" else None
        if verb in READ_VERBS:
            return self.read
        if subresource == "status":
            return self.status
        if subresource == TOKEN_SUBRESOURCE:
            return self.token if verb == "create" else None
        if subresource:
            return None
        if verb in UPDATE_VERBS:
            return self.update
        return self.create if verb == "create" else self.delete if verb in DELETE_VERBS else None


def _uniform(
    read: Role | None, write: Role | None, *, token: Role | None = None, infra: InfraScope | None = None
) -> Rule:
    return Rule(read=read, create=write, update=write, delete=write, token=token, infra=infra)


USER_KIND = _uniform("Reader", "Operator")
# What a provider reports on its InfraProvider (the conditions are herder's verdict on it).
PROVIDER_STATUS_FIELDS = frozenset(
    {"schema", "configSchema", "version", "lastHeartbeat", "heartbeatIntervalSeconds", "capabilities"}
)
ADMIN_KIND = _uniform("Admin", "Admin")

# Written only by herder: readable by Reader and up, changed by nobody through the API.
HERDER_KIND = _uniform("Reader", None)
# Secrets herder generates and keeps: no user reads them (platform staff may, to support).
SEALED_KIND = _uniform("Support", None)

POLICY: dict[str, Rule] = {
    "Namespace": _uniform("Reader", "Admin"),
    "Event": HERDER_KIND,
    # A provider's patches target the machines of its own requests, and nothing else; those of hidden
    # requests are hidden (and named herder-…).
    "ConfigPatch": _uniform(
        "Reader",
        "Operator",
        infra=InfraScope(
            ALL_VERBS, labels=frozenset({INFRA_PROVIDER_LABEL, MACHINE_REQUEST_LABEL, HIDDEN_LABEL})
        ),
    ),
    "ClusterSecrets": SEALED_KIND,
    "ClusterMachineConfig": SEALED_KIND,
    # The configs herder applied, redacted: for the operators of the machine's cluster, not its readers.
    "MachineConfigHistory": Rule(read="Operator", create=None, update=None, delete=None),
    # Machines are registered by Admins; Operators label them and ask for power changes. Which cluster
    # and set a machine is in, herder says.
    "Machine": Rule(
        read="Reader",
        create="Admin",
        update="Operator",
        delete="Admin",
        owned_labels=frozenset(
            {
                "herder.dev/cluster",
                "herder.dev/machine-set",
                INFRA_PROVIDER_LABEL,
                MACHINE_REQUEST_LABEL,
                MACHINE_REQUEST_SET_LABEL,
            }
        ),
        # A provider reads its machines and reports their power.
        infra=InfraScope(READ_VERBS, status=True, status_fields=frozenset({"power"})),
    ),
    "MachineRegistration": _uniform("Reader", "Admin"),
    # A managed control plane's set allocates from a hidden request set, which its users may not know of.
    "MachineSet": Rule(references=("spec.machineRequestSet",)),
    "ClusterMachine": HERDER_KIND,
    "ControlPlaneStatus": HERDER_KIND,
    # A talosconfig maps the caller's role to Talos's.
    "Cluster": Rule(
        read="Reader",
        create="Operator",
        update="Operator",
        delete="Operator",
        # kubeconfig, talosconfig-break-glass: break glass, the cluster's own admin credentials (users
        # reach clusters through herder's Kubernetes proxy and Talos API gateway with their herder
        # credentials). support: a zip of the cluster as the caller sees it (herder cluster support).
        actions={
            "kubeconfig": "Admin",
            "talosconfig": "Reader",
            "talosconfig-break-glass": "Admin",
            "backup": "Operator",
            "support": "Reader",
            # The secrets bundle of an imported cluster (herder cluster import), which makes Machines too.
            "import": "Admin",
        },
    ),
    # etcd backups: stores are an Admin's (S3 credentials); herder writes the backups, which outlive
    # their cluster until an Admin deletes them, and keeps each cluster's backup key sealed.
    "BackupStore": ADMIN_KIND,
    "EtcdBackup": Rule(read="Reader", create=None, update=None, delete="Admin"),
    "EtcdBackupKey": SEALED_KIND,
    # Providers: registered by Admins; each reports its own status (herder keeps its conditions) and
    # reads its own config, which nobody below Admin reads.
    "InfraProvider": Rule(
        read="Reader",
        create="Admin",
        update="Admin",
        delete="Admin",
        infra=InfraScope(READ_VERBS, status=True, status_fields=PROVIDER_STATUS_FIELDS),
        # The managed offer is the platform's: users read its projection (ManagedControlPlaneOffering).
        confidential=("spec.config", "spec.managedControlPlanes"),
    ),
    "ManagedControlPlaneOffering": HERDER_KIND,
    "JoinConfig": Rule(read="Admin", create=None, update=None, delete=None, infra=InfraScope(READ_VERBS)),
    # Join tokens let machines into the platform; links name the machines that joined (managed ones too).
    "JoinToken": ADMIN_KIND,
    # herder makes and updates them; an Admin deletes one to cut a joined machine off (its peer goes, and
    # its rejoin token with it).
    "SideroLink": Rule(read="Admin", create=None, update=None, delete="Admin"),
    "MachineRequestSet": _uniform("Reader", "Operator", infra=InfraScope(READ_VERBS)),
    # A request's status is its provider's alone, Admins included; the provider may change nothing
    # else of it but its own finalizer. A stuck request is let go by an Admin's audited force release.
    "MachineRequest": Rule(
        read="Reader",
        create="Operator",
        update="Operator",
        delete="Operator",
        infra=InfraScope(READ_VERBS | UPDATE_VERBS, status=True, fields=frozenset({"metadata.finalizers"})),
        actions={"release": "Admin"},
    ),
    "ServiceAccount": _uniform("Admin", "Admin", token="Admin"),
    # People: made at their first sign-in; Admins set their role or disable them. Their status is what the
    # identity provider said, written by herder's sign-in alone.
    "User": _uniform("Admin", "Admin", token="Admin"),
    "RoleRule": ADMIN_KIND,
    # The web UI's sessions hold the tokens they act with: herder's alone.
    "WebSession": _uniform(None, None),
    # Tokens are issued through the token subresource of their subject, and revoked by deletion.
    "Token": Rule(read="Admin", create=None, update=None, delete="Admin"),
    "TokenDigest": _uniform(None, None),
    # Append-only: the server writes audit events; nobody changes or removes them through the API.
    "AuditEvent": _uniform("Admin", None),
    # Who may do what on which clusters: an Admin's (anyone reads the rules naming them: herder access show).
    "AccessPolicy": ADMIN_KIND,
}


# The kinds whose objects belong to a cluster (the Cluster, and those labelled herder.dev/cluster): the
# caller's role on that cluster governs them. Every other kind — identities, tokens, providers, stores,
# classes, the access policy — is governed by the caller's own role, whatever labels an object carries:
# a rule on one cluster never reaches beyond it.
CLUSTER_KINDS = frozenset(
    {
        "Cluster",
        "MachineSet",
        "MachineSetNode",
        "ClusterMachine",
        "ClusterMachineConfig",
        "MachineConfigHistory",
        "ClusterSecrets",
        "ControlPlaneStatus",
        "ConfigPatch",
        "ClusterManifest",
        "ClusterHealthCheck",
        "Machine",
        "EtcdBackup",
        "Event",
    }
)


def rule_for(kind: KindInfo) -> Rule:
    """The kind's rule; a kind missing from the table is treated as a user kind, or Admin-only if sensitive."""
    return POLICY.get(kind.kind) or (ADMIN_KIND if kind.sensitive else USER_KIND)


def at_least(role: str, minimum: Role | None) -> bool:
    return minimum is not None and RANK.get(role, 0) >= RANK[minimum]


def allows(role: str, access: Access) -> bool:
    """Whether ``role`` may do ``access`` to some object of its kind (InfraProvider: to its own)."""
    rule = rule_for(access.kind)
    if role == "InfraProvider":
        scope = rule.infra
        if scope is None:
            return False
        if access.subresource == "status":
            return scope.status and access.verb in UPDATE_VERBS | READ_VERBS
        return not access.subresource and access.verb in scope.verbs
    return at_least(role, rule.minimum(access.verb, access.subresource))


def reserved(name: str | None) -> bool:
    """Whether ``name`` (an object's name or generateName, or a namespace) is herder's own."""
    return name is not None and name.startswith(RESERVED_PREFIX)


def reads_confidential(role: str) -> bool:
    """Whether ``role`` reads a kind's confidential fields (an InfraProvider sees only its own objects)."""
    return role == "InfraProvider" or at_least(role, "Admin")


def sees_hidden(role: str) -> bool:
    return RANK.get(role, 0) >= RANK["Support"]
