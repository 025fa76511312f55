"""Talos config patches: every test vector of Talos's config patcher, and the semantics behind them."""

from __future__ import annotations

from typing import Any

import pytest

from herder.talos.documents import DocumentID, load_documents
from herder.talos.patches import (
    DeleteSelector,
    JSON6902Patch,
    PatchError,
    StrategicMergePatch,
    apply_patches,
    load_patch,
    load_patches,
    patch_documents,
)
from tests.data import PATCH_VECTORS

# (folder, config, patches in order, expected output file or the error the patcher must raise), as
# Talos's own tests use the files of each folder.
CASES: list[tuple[str, str, list[str], str]] = [
    (
        "apply",
        "config.yaml",
        ["strategic1.yaml", "jsonpatch1.yaml", "jsonpatch2.yaml", "strategic2.yaml", "strategic3.yaml"],
        "expected.yaml",
    ),
    ("apply", "config.yaml", ["strategic4.yaml"], "expected_manifests.yaml"),
    ("multidoc", "config.yaml", ["strategic1.yaml", "strategic2.yaml", "strategic3.yaml"], "expected.yaml"),
    (
        "multidoc",
        "config.yaml",
        ["jsonpatch.yaml", "strategic1.yaml"],
        "error: JSON6902 patches are not supported for multi-document machine configuration",
    ),
    ("auditpolicy", "config.yaml", ["patch1.yaml"], "expected.yaml"),
    ("patchdelete", "config.yaml", ["strategic1.yaml"], "expected.yaml"),
    (
        "patchdelete",
        "controlplane_orig.yaml",
        ["strategic2.yaml", "strategic3.yaml", "strategic4.yaml"],
        "controlplane_expected.yaml",
    ),
    (
        "patchdeletemissing",
        "config.yaml",
        ["strategic1.yaml"],
        "error: patch delete: path 'machine.network.hostname' in document '/v1alpha1': "
        "failed to delete path 'machine.network.hostname': lookup failed",
    ),
    ("patchlink", "base.yaml", ["patch.yaml"], "expected.yaml"),
    ("patchmixed", "base.yaml", ["patch.yaml"], "expected.yaml"),
]


def _without_zero_values(value: Any) -> Any:
    """Drop what Talos's Go encoder adds or omits for zero values (``type: ""``, ``certSANs: []``,
    ``cluster: null``), so outputs compare as the configs Talos would decode them to."""
    if isinstance(value, dict):
        pruned = {k: _without_zero_values(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if v not in (None, "", [], {})}
    if isinstance(value, list):
        return [_without_zero_values(v) for v in value]
    return value


def _apply(folder: str, config: str, patches: list[str]) -> str:
    loaded = load_patches([(PATCH_VECTORS / folder / name).read_text() for name in patches])
    return apply_patches((PATCH_VECTORS / folder / config).read_text(), loaded)


@pytest.mark.parametrize(("folder", "config", "patches", "expected"), CASES, ids=lambda v: str(v)[:40])
def test_vector(folder: str, config: str, patches: list[str], expected: str) -> None:
    if expected.startswith("error: "):
        with pytest.raises(PatchError) as caught:
            _apply(folder, config, patches)
        assert str(caught.value) == expected.removeprefix("error: ")
        return
    got = load_documents(_apply(folder, config, patches))
    want = load_documents((PATCH_VECTORS / folder / expected).read_text())
    assert [_without_zero_values(d) for d in got] == [_without_zero_values(d) for d in want]


def test_every_vector_file_is_used() -> None:
    used = {f"{folder}/{name}" for folder, config, patches, expected in CASES for name in (config, *patches)}
    used |= {f"{folder}/{expected}" for folder, _, _, expected in CASES if not expected.startswith("error")}
    used |= {
        "delete/delete.yaml",
        "delete/delete_expected.yaml",
        "patch.json",
        "patch.yaml",
        "strategic.yaml",
    }
    present = {str(p.relative_to(PATCH_VECTORS)) for p in PATCH_VECTORS.rglob("*") if p.is_file()}
    assert present == used


def test_inline_manifest_loses_leading_newlines_as_talos_decodes_it() -> None:
    out = load_documents(_apply("apply", "config.yaml", ["strategic4.yaml"]))
    want = load_documents((PATCH_VECTORS / "apply" / "expected_manifests.yaml").read_text())
    contents = out[0]["cluster"]["inlineManifests"][0]["contents"]
    assert contents.startswith("---\n")
    assert contents == want[0]["cluster"]["inlineManifests"][0]["contents"]


def test_delete_extraction_vector() -> None:
    patch = load_patch((PATCH_VECTORS / "delete" / "delete.yaml").read_text())
    assert isinstance(patch, StrategicMergePatch)
    legacy = DocumentID("", "v1alpha1")
    assert patch.deletes == [
        DeleteSelector(DocumentID("v1alpha1", "SideroLinkConfig")),
        DeleteSelector(
            DocumentID("v1alpha1", "ExtensionServiceConfig", "foo"),
            ("configFiles", "[0]"),
            "content",
            "hello",
        ),
        DeleteSelector(legacy, ("machine", "hostname")),
        DeleteSelector(legacy, ("machine", "network", "[0]"), "interface", "eth0"),
    ]
    assert patch.documents == load_documents((PATCH_VECTORS / "delete" / "delete_expected.yaml").read_text())


def test_deletes_apply_before_the_rest_of_their_document() -> None:
    patch = load_patch((PATCH_VECTORS / "patchdelete" / "strategic1.yaml").read_text())
    assert isinstance(patch, StrategicMergePatch)
    kinds = [type(step).__name__ for step in patch.steps]
    assert kinds == ["DeleteSelector", "DeleteSelector", "dict", "DeleteSelector", "DeleteSelector", "dict"]


def test_load_json_patch() -> None:
    patch = load_patch((PATCH_VECTORS / "patch.json").read_text())
    assert patch == JSON6902Patch(({"op": "add", "path": "/machine/certSANs", "value": ["foo.com"]},))


def test_load_yaml_json_patch() -> None:
    patch = load_patch((PATCH_VECTORS / "patch.yaml").read_text())
    assert patch == JSON6902Patch(({"op": "add", "path": "/some/path", "value": ["a", "b", "c"]},))


def test_load_strategic_patch() -> None:
    patch = load_patch((PATCH_VECTORS / "strategic.yaml").read_text())
    assert patch == StrategicMergePatch(({"machine": {"network": {"hostname": "foo.bar"}}},))


def test_consecutive_json_patches_are_joined() -> None:
    texts = [(PATCH_VECTORS / "patch.json").read_text(), (PATCH_VECTORS / "patch.yaml").read_text()]
    patches = load_patches([*texts, '[{"op":"replace","path":"/some","value": []}]'])
    assert len(patches) == 1
    assert isinstance(patches[0], JSON6902Patch)
    assert [op["op"] for op in patches[0].operations] == ["add", "add", "replace"]


def test_mixed_patches_keep_their_order() -> None:
    texts = [(PATCH_VECTORS / name).read_text() for name in ("patch.json", "strategic.yaml", "patch.yaml")]
    patches = load_patches([*texts, '[{"op":"replace","path":"/some","value": []}]'])
    assert [type(p) for p in patches] == [JSON6902Patch, StrategicMergePatch, JSON6902Patch]
    assert len(patches[2].operations) == 2  # type: ignore[union-attr]


def _patch(config: str, *patches: str) -> list[Any]:
    return load_documents(apply_patches(config, load_patches(list(patches))))


LEGACY = "version: v1alpha1\nmachine:\n  type: worker\n"


def test_false_wins_but_empty_values_do_not_overwrite() -> None:
    config = "version: v1alpha1\nmachine:\n  type: worker\n  token: abc\n  features:\n    rbac: true\n"
    [doc] = _patch(config, 'machine:\n  token: ""\n  features:\n    rbac: false\n')
    assert doc["machine"]["token"] == "abc"
    assert doc["machine"]["features"]["rbac"] is False


def test_lists_append_except_replaced_fields() -> None:
    config = (
        "version: v1alpha1\nmachine:\n  certSANs: [a]\ncluster:\n  network:\n"
        "    podSubnets: [10.244.0.0/16]\n    serviceSubnets: [10.96.0.0/12]\n"
    )
    [doc] = _patch(config, "cluster:\n  network:\n    podSubnets: [10.0.0.0/8]\nmachine:\n  certSANs: [b]\n")
    assert doc["machine"]["certSANs"] == ["a", "b"]
    assert doc["cluster"]["network"]["podSubnets"] == ["10.0.0.0/8"]
    assert doc["cluster"]["network"]["serviceSubnets"] == ["10.96.0.0/12"]


def test_extra_args_merge_per_argument_and_replace_each_value() -> None:
    config = "apiVersion: v1alpha1\nkind: KubeletConfig\nextraArgs:\n  a: x\n  b: [1, 2]\n"
    [doc] = _patch(config, "apiVersion: v1alpha1\nkind: KubeletConfig\nextraArgs:\n  b: [3]\n  c: z\n")
    assert doc["extraArgs"] == {"a": "x", "b": [3], "c": "z"}


def test_admission_plugins_merge_by_name() -> None:
    config = "version: v1alpha1\ncluster:\n  apiServer:\n    admissionControl:\n      - name: A\n        configuration: {x: 1}\n"
    patch = "cluster:\n  apiServer:\n    admissionControl:\n      - name: A\n        configuration: {y: 2}\n      - name: B\n"
    [doc] = _patch(config, patch)
    assert doc["cluster"]["apiServer"]["admissionControl"] == [
        {"name": "A", "configuration": {"x": 1, "y": 2}},
        {"name": "B"},
    ]


def test_interfaces_merge_by_device_selector() -> None:
    config = "version: v1alpha1\nmachine:\n  network:\n    interfaces:\n      - deviceSelector: {busPath: '0*'}\n        dhcp: true\n"
    patch = (
        "machine:\n  network:\n    interfaces:\n      - deviceSelector: {busPath: '0*'}\n        mtu: 9000\n"
    )
    [doc] = _patch(config, patch)
    assert doc["machine"]["network"]["interfaces"] == [
        {"deviceSelector": {"busPath": "0*"}, "dhcp": True, "mtu": 9000}
    ]


def test_image_verification_rules_are_replaced_by_image() -> None:
    config = "apiVersion: v1alpha1\nkind: ImageVerificationConfig\nrules:\n  - image: a/*\n    skip: true\n    x: 1\n"
    patch = "apiVersion: v1alpha1\nkind: ImageVerificationConfig\nrules:\n  - image: a/*\n    skip: false\n"
    [doc] = _patch(config, patch)
    assert doc["rules"] == [{"image": "a/*", "skip": False}]


def test_new_documents_are_appended_and_the_legacy_document_comes_first() -> None:
    config = "apiVersion: v1alpha1\nkind: HostnameConfig\nauto: off\n---\n" + LEGACY
    docs = _patch(config, "apiVersion: v1alpha1\nkind: KmsgLogConfig\nname: omni\nurl: tcp://x:1\n")
    assert [d.get("kind", "v1alpha1") for d in docs] == ["v1alpha1", "HostnameConfig", "KmsgLogConfig"]
    assert docs[1]["auto"] == "off"  # YAML 1.2, as Talos reads it: ``off`` is a string


def test_named_documents_merge_only_with_the_same_name() -> None:
    config = "apiVersion: v1alpha1\nkind: KmsgLogConfig\nname: a\nurl: tcp://a:1\n"
    docs = _patch(config, "apiVersion: v1alpha1\nkind: KmsgLogConfig\nname: b\nurl: tcp://b:1\n")
    assert [d["url"] for d in docs] == ["tcp://a:1", "tcp://b:1"]


def test_deleting_a_missing_document_is_skipped() -> None:
    [doc] = _patch(LEGACY, "apiVersion: v1alpha1\nkind: SideroLinkConfig\n$patch: delete\n")
    assert doc["machine"] == {"type": "worker"}


def test_json_patch_on_single_document() -> None:
    [doc] = _patch(LEGACY, '[{"op": "add", "path": "/machine/certSANs", "value": ["x"]}]')
    assert doc["machine"]["certSANs"] == ["x"]


@pytest.mark.parametrize(
    ("config", "patch", "message"),
    [
        (LEGACY, "machine: [", "malformed patch: "),
        (LEGACY, "just a string", "malformed patch: document 1 is a str"),
        (LEGACY, "foo: bar", "malformed patch: document 1: missing kind"),
        (LEGACY, "kind: HostnameConfig\nauto: off", "missing apiVersion"),
        (LEGACY, "machine: {}\nmachin: {}", "unknown keys in the v1alpha1 document: machin"),
        (LEGACY, "- op: frobnicate\n  path: /a", "unknown op 'frobnicate'"),
        (LEGACY, "- op: add\n  path: /a", "lacks 'value'"),
        (LEGACY, "machine:\n  type:\n    $patch: replace", "unsupported '$patch: replace'"),
        (LEGACY, "version: v1alpha1\n$patch: delete", "the v1alpha1 document cannot be deleted"),
        (
            LEGACY,
            "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        vip:\n          $patch: delete\n",
            "cannot delete an inner key in 'machine.network.interfaces.[0].vip'",
        ),
        (LEGACY, '[{"op": "remove", "path": "/cluster/x"}]', "failure applying rfc6902 patches"),
        (LEGACY, "machine:\n  type: [a]", "cannot merge a list into a scalar at machine.type"),
        (LEGACY + "---\n" + LEGACY, "machine: {}", "duplicate document /v1alpha1"),
    ],
)
def test_bad_patches_are_refused_with_the_problem_named(config: str, patch: str, message: str) -> None:
    with pytest.raises(PatchError, match=message.replace("$", r"\$").replace("[", r"\[")):
        apply_patches(config, load_patches([patch]))


def test_patching_an_empty_config_appends_the_patch_documents() -> None:
    docs = _patch("", (PATCH_VECTORS / "multidoc" / "strategic2.yaml").read_text())
    assert [d["kind"] for d in docs] == ["SideroLinkConfig", "ExtensionServiceConfig"]


def test_patch_documents_leaves_its_input_alone() -> None:
    config = load_documents(LEGACY)
    patched = patch_documents(config, load_patches(["machine:\n  certSANs: [a]\n"]))
    assert config == [{"version": "v1alpha1", "machine": {"type": "worker"}}]
    assert patched[0]["machine"]["certSANs"] == ["a"]
