"""Every role x every kind x every verb, over HTTP, against the policy table.

Writes use ``dryRun=All`` so that the objects every role is tried on stay as they are. A second,
hand-written table pins the table's most important entries, so that the matrix is not only the
policy checked against itself.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import httpx
import pytest

from herder.api import roles
from herder.krm.policy import Access
from herder.resources import KindInfo
from herder.resources.access import INFRA_PROVIDER_LABEL, ROLES, SERVICE_ACCOUNT
from herder.resources.catalog import herder_registry
from tests.api.conftest import PROVIDER
from tests.api.server import Server

REGISTRY = herder_registry()
NAMESPACE = "default"

CLUSTER = "target-cluster"
MACHINE = "target-machine"
IN_CLUSTER = {"herder.dev/cluster": CLUSTER}

# A valid body for each kind (labelled for the InfraProvider under test, where that matters).
SAMPLES: dict[str, dict[str, Any]] = {
    "Namespace": {},
    "Event": {"involvedObject": {"kind": "Cluster", "name": CLUSTER}, "reason": "Tried", "message": "m"},
    "ConfigPatch": {"spec": {"data": "machine: {}"}},
    "ClusterManifest": {
        "spec": {
            "mode": "full",
            "manifests": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}],
        }
    },
    "ClusterHealthCheck": {
        "spec": {
            "job": {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "check"},
                "spec": {
                    "template": {
                        "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}
                    }
                },
            }
        }
    },
    "ClusterSecrets": {"spec": {"bundle": "certs: {}"}},
    "Machine": {"spec": {"endpoint": "127.0.0.1:9"}},
    "MachineRegistration": {"spec": {"endpoint": "127.0.0.1:9"}},
    "MachineClass": {"spec": {"selector": {"matchLabels": {"pool": "a"}}}},
    "Cluster": {
        "spec": {"talosVersion": "v1.13.0", "kubernetesVersion": "1.33.0", "endpoint": "https://127.0.0.1:9"}
    },
    "MachineSet": {"metadata": {"labels": IN_CLUSTER}, "spec": {"role": "worker"}},
    "MachineSetNode": {"metadata": {"labels": {**IN_CLUSTER, "herder.dev/machine-set": "target-manual"}}},
    "ClusterMachine": {"spec": {"role": "worker", "talosVersion": "v1.13.0", "kubernetesVersion": "1.33.0"}},
    "ClusterMachineConfig": {"spec": {"config": "x", "hash": "0", "talosContract": "1.13"}},
    "MachineConfigHistory": {"spec": {"cluster": CLUSTER}},
    "ControlPlaneStatus": {},
    "ServiceAccount": {"spec": {"role": "Reader"}},
    "AccessPolicy": {"spec": {}},
    "User": {"spec": {"role": "Reader", "email": "u@example.com"}},
    "RoleRule": {
        "spec": {"selector": {"matchLabels": {"groups.herder.dev/ops": "true"}}, "role": "Operator"}
    },
    "WebSession": {
        "spec": {
            "createdAt": "2026-01-01T00:00:00Z",
            "usedAt": "2026-01-01T00:00:00Z",
            "expiresAt": "2026-01-02T00:00:00Z",
        }
    },
    "Token": {"spec": {"subjectKind": "ServiceAccount", "subject": "admin"}},
    "TokenDigest": {"spec": {"sha256": "0" * 64}},
    "AuditEvent": {
        "spec": {"time": "2026-01-01T00:00:00Z", "user": "x", "verb": "get", "code": 200, "result": "Success"}
    },
    "BackupStore": {"spec": {"filesystem": {"path": "/nonexistent/herder-matrix-backups"}}},
    "EtcdBackup": {
        "metadata": {"labels": IN_CLUSTER},
        "spec": {
            "clusterUUID": "u",
            "snapshot": "1.snapshot",
            "size": 1,
            "store": "default",
            "checksum": "sha256:0",
            "takenAt": "2026-01-01T00:00:00Z",
        },
    },
    "EtcdBackupKey": {"spec": {"key": "AAAA"}},
    "InfraProvider": {"spec": {"displayName": "the provider under test", "config": {"region": "x"}}},
    "JoinConfig": {"spec": {"endpoint": "https://127.0.0.1:9", "token": "t"}},
    "JoinToken": {"spec": {"digest": "0" * 64}},
    "SideroLink": {"spec": {"nodePublicKey": "k", "nodeAddress": "fd00::2/64"}},
    "MachineRequestSet": {"spec": {"providerID": PROVIDER, "talosVersion": "v1.13.0", "machineCount": 0}},
    "MachineRequest": {"spec": {"providerID": PROVIDER, "talosVersion": "v1.13.0"}},
    "ManagedControlPlaneOffering": {
        "spec": {"sizes": [{"name": "xs", "machines": 1}], "talosVersions": ["v1.13.0"]}
    },
}


# Objects herder makes itself (nobody may create them through the API): the target of each.
MADE_BY_HERDER = {
    "ClusterSecrets": CLUSTER,
    "MachineSetNode": MACHINE,
    "ClusterMachine": MACHINE,
    "ClusterMachineConfig": MACHINE,
    "ControlPlaneStatus": CLUSTER,
    "Event": None,  # any event
    "JoinConfig": PROVIDER,
}
# Objects herder makes only from a running cluster (an etcd backup and its key, a machine's config history), which the matrix has no
# machines for, and an offering, which needs a provider offering managed control planes: they are tried
# on a name that does not exist, so an access allowed answers 404.
# The access policy is one object of a fixed name, which the matrix leaves to exist or not.
# WebSessions, like TokenDigests, exist for herder alone: a stand-in body serves for the writes.
NO_TARGET = frozenset(
    {
        "EtcdBackup",
        "EtcdBackupKey",
        "ManagedControlPlaneOffering",
        "AccessPolicy",
        "WebSession",
        "SideroLink",
        "MachineConfigHistory",
    }
)
# Objects whose name is given: an InfraProvider is named by the id of the provider under test.
TARGET_NAMES = {"InfraProvider": PROVIDER, "AccessPolicy": "access-policy"}
# Names a create must use to be valid (a machine set node is named by a free machine's UUID).
NEW_NAMES = {"MachineSetNode": "spare-machine", "AccessPolicy": "access-policy"}


def body(info: KindInfo, name: str) -> dict[str, Any]:
    if info.kind not in SAMPLES:
        pytest.fail(f"kind {info.kind} has no sample body in {__name__}.SAMPLES: add one")
    sample = copy.deepcopy(SAMPLES[info.kind])
    labels = dict((sample.pop("metadata", None) or {}).get("labels") or {})
    if roles.rule_for(info).infra is not None:
        labels[INFRA_PROVIDER_LABEL] = PROVIDER
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if info.namespaced:
        metadata["namespace"] = NAMESPACE
    return {"apiVersion": info.api_version, "kind": info.kind, "metadata": metadata, **sample}


def path(info: KindInfo, name: str | None = None, sub: str | None = None) -> str:
    base = f"/apis/{info.group}/{info.version}" if info.group else f"/api/{info.version}"
    if info.namespaced:
        base += f"/namespaces/{NAMESPACE}"
    base += f"/{info.plural}"
    return base + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")


@pytest.fixture(scope="module")
def targets(server: Server, tokens: dict[str, str]) -> dict[str, dict[str, Any]]:
    """One existing object of every kind, as it is stored, to be read, updated and deleted by every role."""

    async def make() -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        async with server.http(tokens["Support"]) as support, server.client() as admin:
            issued = await admin.issue_token(SERVICE_ACCOUNT, "admin", description="matrix target")
            audit_name = (await admin.list("auditevents")).items[0].name
            existing = {"Token": issued.name, "TokenDigest": issued.name, "AuditEvent": audit_name}
            for info in REGISTRY:
                if info.kind in MADE_BY_HERDER:
                    continue
                name = existing.get(info.kind) or TARGET_NAMES.get(info.kind, f"target-{info.kind.lower()}")
                if info.kind not in existing and info.kind not in NO_TARGET:
                    created = await support.post(path(info), json=body(info, name))
                    assert created.status_code == 201, created.text
                if info.kind in NO_TARGET:
                    out[info.kind] = body(info, name)
                    continue
                if info.kind == "TokenDigest":  # nobody may read one: a stand-in body serves for the writes
                    out[info.kind] = body(info, name)
                    continue
                answer = await support.get(path(info, name))
                assert answer.status_code == 200, answer.text
                out[info.kind] = answer.json()
            # A machine set of the target machine, and a free machine for a set that binds by hand: from
            # them herder makes the objects nobody may create.
            machines = REGISTRY.get("Machine")
            sets = REGISTRY.get("MachineSet")
            spare = body(machines, "spare-machine")
            assert (await support.post(path(machines), json=spare)).status_code == 201
            for name, spec in (("target-static", {"machines": [MACHINE]}), ("target-manual", {})):
                made = body(sets, name)
                made["spec"].update(spec)
                assert (await support.post(path(sets), json=made)).status_code == 201
            for kind, name in MADE_BY_HERDER.items():
                info = REGISTRY.get(kind)
                for _ in range(200):
                    if name is None:
                        items = (await support.get(path(info))).json()["items"]
                        if items:
                            out[kind] = {"apiVersion": info.api_version, "kind": kind, **items[0]}
                            break
                    else:
                        answer = await support.get(path(info, name))
                        if answer.status_code == 200:
                            out[kind] = answer.json()
                            break
                    await asyncio.sleep(0.1)
                else:
                    pytest.fail(f"herder made no {kind} {name or ''} for the matrix")
            # herder labelled the target machine with its cluster meanwhile: take it as it is now.
            out["Machine"] = (await support.get(path(machines, MACHINE))).json()
            out["Cluster"] = (await support.get(path(REGISTRY.get("Cluster"), CLUSTER))).json()
        return out

    return asyncio.run(make())


async def _try(
    http: httpx.AsyncClient, role: str, info: KindInfo, verb: str, sub: str | None, target: dict[str, Any]
) -> int:
    name = target["metadata"]["name"]
    dry = {"dryRun": "All"}
    if verb == "get":
        return (await http.get(path(info, name))).status_code
    if verb == "list":
        return (await http.get(path(info))).status_code
    if verb == "watch":
        async with http.stream("GET", path(info), params={"watch": "1", "timeoutSeconds": "1"}) as answer:
            return answer.status_code
    if verb == "create" and sub is not None:
        return (await http.post(path(info, name, sub), json={})).status_code
    if verb == "create":
        new = NEW_NAMES.get(info.kind, f"new-{info.kind.lower()}")
        made = body(info, new)
        if INFRA_PROVIDER_LABEL in roles.rule_for(info).owned_labels:
            del made["metadata"]["labels"][INFRA_PROVIDER_LABEL]  # herder's to set on this kind
        return (await http.post(path(info), params=dry, json=made)).status_code
    if verb == "update":
        # As the caller reads it now, when it may (controllers keep changing some targets' status,
        # finalizers), and unconditional.
        fresh = await http.get(path(info, name))
        unconditional = fresh.json() if fresh.status_code == 200 else copy.deepcopy(target)
        unconditional["metadata"].pop("resourceVersion", None)
        return (await http.put(path(info, name, sub), params=dry, json=unconditional)).status_code
    if verb == "patch":
        patch = {"metadata": {"labels": {"touched": "yes"}}} if sub is None else {"status": {}}
        scope = roles.rule_for(info).infra
        if sub is None and scope is not None and scope.fields is not None and role == "InfraProvider":
            patch = {"metadata": {"finalizers": ["touched.example/yes"]}}  # all it may change
        headers = {"Content-Type": "application/merge-patch+json"}
        return (await http.patch(path(info, name, sub), params=dry, json=patch, headers=headers)).status_code
    if verb == "deletecollection":
        only = {**dry, "fieldSelector": f"metadata.name={name}"}
        return (await http.delete(path(info), params=only)).status_code
    assert verb == "delete"
    return (await http.delete(path(info, name), params=dry)).status_code


def _accesses(info: KindInfo) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = [
        (verb, None)
        for verb in ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
    ]
    if info.has_status:
        out += [("update", "status"), ("patch", "status")]
    if info.kind in ("ServiceAccount", "User"):
        out.append(("create", roles.TOKEN_SUBRESOURCE))
    out += [("create", action) for action in roles.rule_for(info).actions]
    return out


@pytest.mark.parametrize("role", ROLES)
async def test_every_kind_and_verb_is_decided_by_the_table(
    role: str, server: Server, tokens: dict[str, str], targets: dict[str, dict[str, Any]]
) -> None:
    wrong = []
    async with server.http(tokens[role]) as http:
        for info in REGISTRY:
            for verb, sub in _accesses(info):
                allowed = roles.allows(
                    role, Access(verb, info, NAMESPACE if info.namespaced else None, "x", sub)
                )
                code = await _try(http, role, info, verb, sub, targets[info.kind])
                # An action the table allows may still refuse what it is asked (a release without
                # force is a 400): the table decides only whether the call gets past authorization.
                if sub in roles.rule_for(info).actions:
                    done = code != 403
                else:
                    done = 200 <= code < 300 or (code == 404 and info.kind in NO_TARGET)
                if done != allowed or (not allowed and code != 403):
                    wrong.append(
                        f"{role} {verb}{'/' + sub if sub else ''} {info.kind}: {code}, allowed={allowed}"
                    )
    assert wrong == []


# (role, kind, verb, allowed): the entries a mistake in the table would hurt most.
PINNED = [
    ("Reader", "ConfigPatch", "list", True),
    ("Reader", "ConfigPatch", "create", False),
    ("Reader", "ClusterSecrets", "get", False),
    ("Reader", "AuditEvent", "list", False),
    ("Reader", "ServiceAccount", "list", False),
    ("Operator", "ConfigPatch", "patch", True),
    ("Operator", "Namespace", "create", False),
    ("Operator", "ClusterSecrets", "list", False),
    ("Admin", "AuditEvent", "list", True),
    ("Admin", "AuditEvent", "delete", False),
    ("Admin", "AuditEvent", "deletecollection", False),
    ("Operator", "ConfigPatch", "deletecollection", True),
    ("Reader", "ConfigPatch", "deletecollection", False),
    ("Operator", "Namespace", "deletecollection", False),
    ("Admin", "Token", "delete", True),
    ("Admin", "Token", "create", False),
    ("Admin", "TokenDigest", "get", False),
    ("Support", "TokenDigest", "list", False),
    ("Support", "AuditEvent", "update", False),
    ("Support", "ClusterSecrets", "get", True),
    ("Admin", "ClusterSecrets", "get", False),
    ("Admin", "ClusterMachineConfig", "list", False),
    ("Admin", "ClusterMachine", "create", False),
    ("Reader", "Machine", "list", True),
    ("Operator", "Machine", "create", False),
    ("Operator", "Machine", "patch", True),
    ("Operator", "MachineSet", "create", True),
    ("Reader", "Cluster", "delete", False),
    ("InfraProvider", "ConfigPatch", "create", True),
    ("InfraProvider", "ConfigPatch", "deletecollection", True),
    ("InfraProvider", "Namespace", "list", False),
    ("InfraProvider", "ServiceAccount", "get", False),
    ("Operator", "BackupStore", "get", False),
    ("Admin", "BackupStore", "create", True),
    ("Reader", "EtcdBackup", "list", True),
    ("Admin", "EtcdBackup", "create", False),
    ("Operator", "EtcdBackup", "delete", False),
    ("Admin", "EtcdBackup", "delete", True),
    ("Admin", "EtcdBackupKey", "get", False),
    ("Reader", "MachineRequest", "list", True),
    ("Operator", "MachineRequest", "create", True),
    ("Admin", "InfraProvider", "create", True),
    ("Operator", "InfraProvider", "create", False),
    ("Reader", "JoinConfig", "get", False),
    ("Operator", "JoinToken", "list", False),
    ("Admin", "JoinToken", "create", True),
    ("Admin", "SideroLink", "create", False),
    ("Reader", "SideroLink", "get", False),
    ("InfraProvider", "MachineRequest", "create", False),
    ("InfraProvider", "MachineRequest", "delete", False),
    ("InfraProvider", "MachineRequest", "patch", True),
    ("InfraProvider", "InfraProvider", "update", False),
    ("InfraProvider", "JoinConfig", "get", True),
    ("InfraProvider", "Machine", "get", True),
    ("InfraProvider", "Machine", "patch", False),
]


@pytest.mark.parametrize(("role", "kind", "verb", "allowed"), PINNED)
def test_pinned_entries_of_the_table(role: str, kind: str, verb: str, allowed: bool) -> None:
    assert roles.allows(role, Access(verb, REGISTRY.get(kind))) is allowed


# (role, kind, action, allowed): object actions a mistake in the table would hurt most.
PINNED_ACTIONS = [
    ("Admin", "Cluster", "import", True),
    ("Operator", "Cluster", "import", False),
    ("Admin", "Cluster", "kubeconfig", True),
    ("Operator", "Cluster", "kubeconfig", False),
]


@pytest.mark.parametrize(("role", "kind", "action", "allowed"), PINNED_ACTIONS)
def test_pinned_actions_of_the_table(role: str, kind: str, action: str, allowed: bool) -> None:
    assert roles.allows(role, Access("create", REGISTRY.get(kind), NAMESPACE, "x", action)) is allowed


def test_an_import_and_its_abort_are_an_admins_to_mark() -> None:
    # herder makes no secrets for an imported cluster, and lets an aborted one's machines go unreset.
    for annotation in ("herder.dev/imported", "herder.dev/import-aborted"):
        assert roles.ROLE_SETTABLE_ANNOTATIONS[annotation] == "Admin"


async def test_infra_provider_sees_and_touches_only_its_own_objects(
    server: Server, tokens: dict[str, str], targets: dict[str, dict[str, Any]]
) -> None:
    # ``targets`` made "target-configpatch", of this provider.
    info = REGISTRY.get("ConfigPatch")
    foreign = body(info, "of-another-provider")
    foreign["metadata"]["labels"][INFRA_PROVIDER_LABEL] = "p2"
    async with server.http(tokens["Support"]) as support:
        assert (await support.post(path(info), json=foreign)).status_code == 201
    async with server.http(tokens["InfraProvider"]) as provider:
        assert (await provider.get(path(info, "of-another-provider"))).status_code == 404
        names = [o["metadata"]["name"] for o in (await provider.get(path(info))).json()["items"]]
        assert "of-another-provider" not in names and "target-configpatch" in names
        headers = {"Content-Type": "application/merge-patch+json"}
        steal = {"metadata": {"labels": {INFRA_PROVIDER_LABEL: "p2"}}}
        answer = await provider.patch(path(info, "target-configpatch"), json=steal, headers=headers)
        assert answer.status_code == 403
        assert f'labelled "{INFRA_PROVIDER_LABEL}={PROVIDER}"' in answer.json()["message"]
        mine = body(info, "unlabelled")
        del mine["metadata"]["labels"]
        assert (await provider.post(path(info), json=mine)).status_code == 403
