"""What the emulated kubelets and control planes read from configs herder generates, in both config forms
(the v1alpha1 sections before contract 1.14, the typed Kube* documents from 1.14)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

import pytest

from herder.emu.cluster.kube_facts import KubeFacts
from herder.emu.machine.config import parse_config
from herder.emu.machine.kube_config import CONTROL_PLANE_TAINT, kube_facts
from herder.talos.contracts import VersionContract
from herder.talos.documents import dump_documents, is_legacy, load_documents
from herder.talos.generate import generate_bundle
from herder.talos.generate_input import ConfigInput
from herder.talos.secrets import SecretsBundle, generate_secrets

CONTROL_PLANE_LABEL = ("node-role.kubernetes.io/control-plane", "")


@cache
def _secrets(contract: str) -> SecretsBundle:
    return generate_secrets(VersionContract.parse(contract))


def _configs(contract: str, *, allow_scheduling: bool = False) -> tuple[str, str]:
    bundle = generate_bundle(
        ConfigInput(
            cluster_name="facts",
            endpoint="https://facts.example:6443",
            kubernetes_version="1.32.3",
            contract=VersionContract.parse(contract),
            secrets=_secrets(contract),
            allow_scheduling_on_control_planes=allow_scheduling,
        )
    )
    return bundle.controlplane, bundle.worker


def _facts(text: str) -> KubeFacts:
    return kube_facts(parse_config(text.encode(), "v1.15.0"))


@pytest.mark.parametrize("contract", ["1.13", "1.14"])
def test_control_planes_are_labelled_and_tainted_workers_not(contract: str) -> None:
    controlplane, worker = _configs(contract)
    cp, wk = _facts(controlplane), _facts(worker)
    assert CONTROL_PLANE_LABEL in cp.labels and cp.taints == (CONTROL_PLANE_TAINT,)
    assert CONTROL_PLANE_LABEL not in wk.labels and wk.taints == ()
    assert cp.kubelet_version == wk.kubelet_version == "v1.32.3"
    assert cp.apiserver_image == "registry.k8s.io/kube-apiserver:v1.32.3"
    assert cp.register_node and wk.register_node
    assert cp.proxy and cp.coredns and cp.flannel
    assert "facts.example" in cp.apiserver_sans and cp.service_ip(10) == "10.96.0.10"


@pytest.mark.parametrize("contract", ["1.13", "1.14"])
def test_scheduling_on_control_planes_drops_the_taint(contract: str) -> None:
    controlplane, _worker = _configs(contract, allow_scheduling=True)
    assert _facts(controlplane).taints == ()


def _edited(text: str, kind: str, change: Mapping[str, object]) -> str:
    documents = load_documents(text)
    for document in documents:
        if (kind == "v1alpha1" and is_legacy(document)) or document.get("kind") == kind:
            for path, value in change.items():
                *parents, last = path.split(".")
                target = document
                for part in parents:
                    target = target.setdefault(part, {})
                target[last] = value
    return dump_documents(documents)


def test_node_registration_can_be_skipped_in_either_form() -> None:
    legacy, _ = _configs("1.13")
    typed, _ = _configs("1.14")
    assert not _facts(
        _edited(legacy, "v1alpha1", {"machine.kubelet.skipNodeRegistration": True})
    ).register_node
    extra = {"machine.kubelet.extraArgs": {"register-node": "false"}}
    assert not _facts(_edited(legacy, "v1alpha1", extra)).register_node
    assert not _facts(_edited(typed, "KubeNodeConfig", {"skipNodeRegistration": True})).register_node


def test_disabled_add_ons() -> None:
    legacy, _ = _configs("1.13")
    edited = _edited(legacy, "v1alpha1", {"cluster.proxy.disabled": True, "cluster.coreDNS.disabled": True})
    facts = _facts(edited)
    assert not facts.proxy and not facts.coredns
