"""Who a talosconfig's certificate lets in, and which nodes they find, checked on a real (memory) store:
a certificate never grants more than its account holds now, an account made again does not inherit it,
hidden machines do not exist below Support and managed ones are refused."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from herder.krm.policy import Identity
from herder.resources import Resource
from herder.resources.catalog import herder_registry
from herder.state.store import SYSTEM, Store
from herder.state.url import open_store
from herder.talos_gateway.authority import ClusterRef, ForeignCertificate, GatewayAuthority
from herder.talos_gateway.authority import read_client_certificate as read_der
from herder.talos_gateway.callers import Caller, Callers, Refused
from herder.talos_gateway.targets import find


def _object(kind: str, name: str, spec: dict[str, Any], **meta: Any) -> Resource:
    info = herder_registry().get(kind)
    body: dict[str, Any] = {"apiVersion": info.api_version, "kind": kind, "metadata": {"name": name, **meta}}
    if info.namespaced:
        body["metadata"].setdefault("namespace", "default")
    return Resource.model_validate({**body, "spec": spec})


def read_client_certificate(pem: bytes) -> Any:
    """What the gateway reads of a certificate its TLS front verified (which hands it over as DER)."""
    return read_der(x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER))


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    opened = await open_store("memory://", herder_registry())
    namespace = Resource.model_validate(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}
    )
    await opened.create(namespace, actor=SYSTEM)
    yield opened
    await opened.close()


async def _cluster(store: Store, name: str) -> tuple[Resource, ClusterRef]:
    made = await store.create(
        _object("Cluster", name, {"talosVersion": "v1.13.9", "kubernetesVersion": "1.33.0"}), actor=SYSTEM
    )
    return made, ClusterRef("default", name, made.metadata.uid or "")


async def test_a_certificate_grants_no_more_than_its_account_holds_now(store: Store, tmp_path: Path) -> None:
    authority = GatewayAuthority(tmp_path)
    _, alpha = await _cluster(store, "alpha")
    account = await store.create(_object("ServiceAccount", "ci", {"role": "Admin"}), actor=SYSTEM)
    pair = authority.issue(
        "serviceaccount:ci", account.metadata.uid or "", "os:admin", alpha, timedelta(hours=1)
    )
    presented = read_client_certificate(pair.crt)
    assert presented.talos_roles == {"os:admin"} and presented.cluster == alpha
    callers = Callers(store, support=False)
    assert (await callers.of(presented)).talos_role == "os:admin"

    account.spec = {"role": "Reader"}
    await store.update(account, actor=SYSTEM)
    caller = await callers.of(presented)
    assert caller.talos_role == "os:reader" and caller.identity.role == "Reader"
    assert caller.may_call("/machine.MachineService/Version")
    assert not caller.may_call("/machine.MachineService/Reboot")

    # An Operator's certificate stays an Operator's when its account becomes Admin.
    operator = authority.issue(
        "serviceaccount:ci", account.metadata.uid or "", "os:operator", alpha, timedelta(hours=1)
    )
    account = await store.get("ServiceAccount", "ci")
    account.spec = {"role": "Admin"}
    await store.update(account, actor=SYSTEM)
    assert (await callers.of(read_client_certificate(operator.crt))).talos_role == "os:operator"

    await store.delete("ServiceAccount", "ci", actor=SYSTEM)
    await store.create(_object("ServiceAccount", "ci", {"role": "Admin"}), actor=SYSTEM)
    with pytest.raises(Refused, match="no longer exists") as refused:
        await callers.of(presented)
    assert refused.value.code is grpc.StatusCode.UNAUTHENTICATED


async def test_support_is_someone_only_while_the_server_holds_its_token(store: Store, tmp_path: Path) -> None:
    _, alpha = await _cluster(store, "alpha")
    pair = GatewayAuthority(tmp_path).issue("support:platform", "", "os:admin", alpha, timedelta(hours=1))
    presented = read_client_certificate(pair.crt)
    assert (await Callers(store, support=True).of(presented)).identity == Identity(
        "support:platform", "Support"
    )
    with pytest.raises(Refused, match="no longer exists"):
        await Callers(store, support=False).of(presented)


async def test_a_certificate_of_another_cluster_finds_no_cluster(store: Store, tmp_path: Path) -> None:
    authority = GatewayAuthority(tmp_path)
    cluster, alpha = await _cluster(store, "alpha")
    account = await store.create(_object("ServiceAccount", "ci", {"role": "Operator"}), actor=SYSTEM)
    uid = account.metadata.uid or ""
    assert (
        await Callers(store, support=False).of(
            read_client_certificate(
                authority.issue("serviceaccount:ci", uid, "os:operator", alpha, timedelta(hours=1)).crt
            )
        )
    ).cluster == cluster
    # A cluster made again under the old name is another cluster.
    stale = ClusterRef("default", "alpha", "0000")
    pair = authority.issue("serviceaccount:ci", uid, "os:operator", stale, timedelta(hours=1))
    assert (await Callers(store, support=False).of(read_client_certificate(pair.crt))).cluster is None


def test_a_certificate_that_binds_nothing_is_foreign(tmp_path: Path) -> None:
    from herder.talos import pki
    from herder.talos.talosconfig import issue_client_certificate

    ca = pki.new_ca(pki.KeyType.ECDSA_P256, organization="talos")
    with pytest.raises(ForeignCertificate):
        read_client_certificate(issue_client_certificate(ca, ("os:admin",)).crt)


async def test_hidden_machines_do_not_exist_below_support_and_managed_ones_are_refused(store: Store) -> None:
    cluster, alpha = await _cluster(store, "alpha")
    in_alpha = {"herder.dev/cluster": "alpha"}
    machines = {
        "worker": ({"endpoint": "10.0.0.1"}, {"hostname": "w1", "addresses": ["10.1.0.1"]}, {}, {}),
        "hidden": ({"endpoint": "10.0.0.2"}, {}, {"herder.dev/hidden": "true"}, {}),
        "managed": ({"endpoint": "10.0.0.3"}, {}, {}, {"herder.dev/read-only": "true"}),
        "beta": ({"endpoint": "10.0.0.4"}, {}, {"herder.dev/cluster": "beta"}, {}),
    }
    for name, (spec, status, labels, notes) in machines.items():
        machine = _object("Machine", name, spec, labels={**in_alpha, **labels}, annotations=notes)
        machine.status = status
        await store.create(machine, actor=SYSTEM)
    nodes = ["10.0.0.1", "w1", "10.1.0.1", "worker", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.9.9.9"]

    reader = Caller(Identity("serviceaccount:r", "Reader"), "os:reader", cluster, alpha)
    found = {t.node: t for t in await find(store, reader, nodes)}
    assert all(found[n].machine is not None and found[n].refused is None for n in nodes[:4])
    assert {found[n].machine.name for n in nodes[:4] if found[n].machine} == {"worker"}
    unknown = {n: found[n].refused for n in ("10.0.0.2", "10.0.0.4", "10.9.9.9")}
    assert all(r is not None and r.code is grpc.StatusCode.NOT_FOUND for r in unknown.values())
    assert len({r.message.replace(n, "N") for n, r in unknown.items() if r}) == 1
    managed = found["10.0.0.3"].refused
    assert managed is not None and managed.code is grpc.StatusCode.PERMISSION_DENIED
    assert "managed by the platform" in managed.message

    support = Caller(Identity("support:platform", "Support"), "os:admin", cluster, alpha)
    found = {t.node: t for t in await find(store, support, nodes)}
    assert (
        found["10.0.0.2"].machine is not None
        and found["10.0.0.2"].hidden
        and found["10.0.0.2"].refused is None
    )
    assert found["10.0.0.3"].refused is None
    assert found["10.0.0.4"].refused is not None  # another cluster's, for Support too

    gone = Caller(Identity("serviceaccount:r", "Reader"), "os:reader", None, alpha)
    assert all(t.refused is not None for t in await find(store, gone, nodes))


def test_grpc_s_own_tls_speaks_for_the_gateway_s_certificates_not_for_talos_s(tmp_path: Path) -> None:
    """The gateway's talosconfigs (ECDSA) need no tunnel in herder's client; a Talos machine's (Ed25519) do."""
    from herder.talos import pki
    from herder.talos.machine import tls
    from herder.talos.talosconfig import issue_client_certificate

    authority = GatewayAuthority(tmp_path)
    issued = authority.issue(
        "serviceaccount:ci", "uid", "os:reader", ClusterRef("d", "a", "u"), timedelta(hours=1)
    )
    assert tls.native(authority.ca_certificate, issued.crt, issued.key)
    talos = pki.new_ca(pki.KeyType.ED25519, organization="talos")
    client = issue_client_certificate(talos, ("os:admin",))
    assert not tls.native(talos.crt, client.crt, client.key)
