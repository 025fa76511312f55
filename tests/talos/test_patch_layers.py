"""Layered patches: application order and the paths user patches may not touch."""

from __future__ import annotations

import pytest

from herder.talos.contracts import SUPPORTED, VersionContract
from herder.talos.documents import load_documents
from herder.talos.generate import MachineType, generate_config, generate_documents
from herder.talos.patch_layers import ForbiddenPatch, LayeredPatch, PatchLayer, apply_layers
from herder.talos.patches import PatchError
from tests.data import GOLDEN
from tests.talos.test_generate import base_input

CONFIG = (GOLDEN / "v1.11" / "base-worker.yaml").read_text()


def _hostname(text: str) -> str:
    [doc] = [d for d in load_documents(text) if "machine" in d]
    hostname: str = doc["machine"]["network"]["hostname"]
    return hostname


def _set_hostname(layer: PatchLayer, name: str, hostname: str) -> LayeredPatch:
    return LayeredPatch(layer, name, f"machine:\n  network:\n    hostname: {hostname}\n")


def test_layers_apply_in_order_then_by_name_within_a_layer() -> None:
    patches = [
        _set_hostname(PatchLayer.MACHINE, "100-m", "machine"),
        _set_hostname(PatchLayer.CLUSTER, "900-c", "cluster-late"),
        _set_hostname(PatchLayer.CLUSTER_MACHINE, "100-cm", "cluster-machine"),
        _set_hostname(PatchLayer.CLUSTER, "100-c", "cluster-early"),
        _set_hostname(PatchLayer.SYSTEM, "999-s", "system"),
        _set_hostname(PatchLayer.MACHINE_SET, "100-ms", "machine-set"),
    ]
    assert _hostname(apply_layers(CONFIG, patches)) == "machine"
    for drop, expected in [
        ("100-m", "cluster-machine"),
        ("100-cm", "machine-set"),
        ("100-ms", "cluster-late"),
        ("900-c", "cluster-early"),
        ("100-c", "system"),
    ]:
        patches = [p for p in patches if p.name != drop]
        assert _hostname(apply_layers(CONFIG, patches)) == expected


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("cluster:\n  clusterName: other", "cluster.clusterName"),
        ("cluster:\n  controlPlane:\n    endpoint: https://evil:6443", "cluster.controlPlane.endpoint"),
        ("cluster:\n  ca:\n    crt: x", "cluster.ca"),
        ("cluster:\n  secretboxEncryptionSecret: x", "cluster.secretboxEncryptionSecret"),
        ("cluster:\n  etcd:\n    ca: {crt: x, key: y}", "cluster.etcd.ca"),
        ("machine:\n  type: controlplane", "machine.type"),
        ("machine:\n  install:\n    disk: /dev/sdb", "machine.install.disk"),
        ("machine:\n  token: x", "machine.token"),
        ("machine:\n  ca:\n    $patch: delete", "machine.ca"),
        ("machine:\n  install:\n    $patch: delete", "machine.install.disk"),
        ('[{"op": "replace", "path": "/cluster/clusterName", "value": "x"}]', "cluster.clusterName"),
        ('[{"op": "remove", "path": "/cluster"}]', "cluster.clusterName"),
        ('[{"op": "move", "from": "/machine/token", "path": "/machine/x"}]', "machine.token"),
        (
            "apiVersion: v1alpha1\nkind: KubeAPIServerCAConfig\nissuingCA: {}",
            "KubeAPIServerCAConfig documents",
        ),
        ("apiVersion: v1alpha1\nkind: KubeClusterConfig\n$patch: delete", "KubeClusterConfig documents"),
        (
            "apiVersion: v1alpha1\nkind: KubeServiceAccountConfig\nissuer:\n  privateKey: x",
            "KubeServiceAccountConfig.issuer.privateKey",
        ),
        (
            "machine:\n  features:\n    kubernetesTalosAPIAccess:\n      allowedRoles: [os:reader, os:admin]",
            "the os:admin role in machine.features.kubernetesTalosAPIAccess.allowedRoles",
        ),
        (
            '[{"op": "add", "path": "/machine/features/kubernetesTalosAPIAccess/allowedRoles/-", "value": "os:admin"}]',
            "the os:admin role in machine.features.kubernetesTalosAPIAccess.allowedRoles",
        ),
        (
            "apiVersion: v1alpha1\nkind: KubeTalosAPIAccessConfig\nallowedRoles: [os:admin]",
            "the os:admin role in KubeTalosAPIAccessConfig.allowedRoles",
        ),
    ],
)
def test_user_patches_may_not_touch_owned_paths(text: str, path: str) -> None:
    patch = LayeredPatch(PatchLayer.CLUSTER, "200-user", text)
    with pytest.raises(ForbiddenPatch) as caught:
        apply_layers(CONFIG, [patch])
    assert caught.value.path == path
    assert str(caught.value) == f"config patch '200-user' may not change {path}"


@pytest.mark.parametrize(
    ("text", "path", "value"),
    [
        (
            "cluster:\n  controlPlane:\n    localAPIServerPort: 7443",
            "cluster.controlPlane.localAPIServerPort",
            7443,
        ),
        ("machine:\n  install:\n    extraKernelArgs: [a=b]", "machine.install.extraKernelArgs", ["a=b"]),
        (
            "machine:\n  features:\n    kubernetesTalosAPIAccess:\n      allowedRoles: [os:reader]",
            "machine.features.kubernetesTalosAPIAccess.allowedRoles",
            ["os:reader"],
        ),
        ('[{"op": "add", "path": "/machine/certSANs", "value": ["x"]}]', "machine.certSANs", ["x"]),
        # A test of a path herder owns reads it, and changes nothing.
        ('[{"op": "test", "path": "/machine/type", "value": "worker"}]', "machine.type", "worker"),
    ],
)
def test_user_patches_may_touch_the_rest(text: str, path: str, value: object) -> None:
    patched = apply_layers(CONFIG, [LayeredPatch(PatchLayer.MACHINE, "300-user", text)])
    assert _at(patched, path) == value
    # Nothing else changed: putting the original value back gives the unpatched config.
    unpatched = apply_layers(CONFIG, [])
    [doc] = [d for d in load_documents(patched) if "machine" in d]
    [before] = [d for d in load_documents(unpatched) if "machine" in d]
    node, original = doc, before
    *parents, leaf = path.split(".")
    for part in parents:
        if part not in original:  # the patch made this part: take it away whole
            leaf = part
            break
        node, original = node[part], original[part]
    if leaf in original:
        node[leaf] = original[leaf]
    else:
        del node[leaf]
    assert doc == before


def _at(text: str, path: str) -> object:
    [doc] = [d for d in load_documents(text) if "machine" in d]
    node: object = doc
    for part in path.split("."):
        assert isinstance(node, dict) and part in node, f"{path}: no {part}"
        node = node[part]
    return node


def test_system_patches_are_not_policed() -> None:
    patch = LayeredPatch(PatchLayer.SYSTEM, "000-install", "machine:\n  install:\n    disk: /dev/vdb\n")
    [doc] = [d for d in load_documents(apply_layers(CONFIG, [patch])) if "machine" in d]
    assert doc["machine"]["install"]["disk"] == "/dev/vdb"


def test_a_malformed_layer_names_its_patch() -> None:
    with pytest.raises(PatchError, match="config patch '400-broken': malformed patch"):
        apply_layers(CONFIG, [LayeredPatch(PatchLayer.MACHINE_SET, "400-broken", "machine: [")])


@pytest.mark.parametrize("contract", SUPPORTED, ids=str)
@pytest.mark.parametrize("machine_type", list(MachineType), ids=str)
def test_generated_documents_patch_to_the_same_config_as_their_yaml(
    contract: VersionContract, machine_type: MachineType
) -> None:
    # herder patches the generated documents without writing and reading them as YAML first: the result
    # must be the very text the YAML gives, or every running machine would be sent a "changed" config.
    inp = base_input(contract, kubespan=True)
    layers = [_set_hostname(PatchLayer.CLUSTER_MACHINE, "100-cm", "node-1")]
    documents = generate_documents(inp, machine_type)
    assert apply_layers(documents, layers) == apply_layers(generate_config(inp, machine_type), layers)
    assert documents == generate_documents(inp, machine_type)  # patching left them untouched
