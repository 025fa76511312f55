"""Reading a running cluster back: the secrets bundle out of a control plane's config (legacy v1alpha1
fields up to contract 1.13, typed documents from 1.14), the two patches that turn herder's config into
the running one, and the fields where two configs differ."""

from __future__ import annotations

import pytest

from herder.talos.config_import import (
    bundle_from_config,
    derive_patches,
    differences,
    first_difference,
    same_config,
)
from herder.talos.contracts import VersionContract
from herder.talos.documents import dump_documents, load_documents
from herder.talos.generate import ConfigInput, MachineType, generate_config
from herder.talos.patch_layers import LayeredPatch, PatchLayer, apply_layers
from herder.talos.secrets import InvalidSecrets, SecretsBundle, load_secrets
from tests.controllers.site import secrets_bundle


def _config(contract: str, role: MachineType = MachineType.CONTROLPLANE, image: str = "") -> str:
    inp = ConfigInput(
        cluster_name="india",
        endpoint="https://10.5.0.1:6443",
        kubernetes_version="1.33.0",
        contract=VersionContract.parse(contract),
        secrets=_bundle(contract),
        install_image=image,
    )
    return generate_config(inp, role)


def _bundle(contract: str) -> SecretsBundle:
    return load_secrets(secrets_bundle(contract), check_keys=False)


@pytest.mark.parametrize("contract", ["1.13", "1.14"])
def test_the_bundle_reads_back_out_of_a_control_planes_config(contract: str) -> None:
    assert bundle_from_config(_config(contract)) == _bundle(contract)


def test_a_workers_config_is_refused_naming_what_it_lacks() -> None:
    with pytest.raises(InvalidSecrets, match=r"the config lacks cluster\.ca\.key: is it a control plane's\?"):
        bundle_from_config(_config("1.13", MachineType.WORKER))


def test_the_patches_turn_herders_config_into_the_running_one() -> None:
    generated = _config("1.13")
    running_docs = load_documents(_config("1.13", image="ghcr.io/example/installer:v1.13.9"))
    running_docs[0]["machine"]["sysctls"] = {"kernel.domainname": "india.example"}
    running_docs[0]["machine"]["certSANs"] = ["10.5.0.9"]  # a list replaced, not appended to
    running_docs[0]["cluster"].pop("discovery", None)
    running = dump_documents(running_docs)
    found = differences(load_documents(generated), running_docs)
    assert "machine.install.image" in found and "machine.sysctls" in found
    assert "machine.certSANs" in found and "cluster.discovery" in found
    remove, add = derive_patches(load_documents(generated), running_docs)
    assert remove and add
    layers = [LayeredPatch(PatchLayer.CLUSTER_MACHINE, f"import-{i}", t) for i, t in enumerate((remove, add))]
    made = apply_layers(generated, layers)
    assert same_config(made, running) and first_difference(made, running) == ""


def test_configs_that_say_the_same_need_no_patch() -> None:
    config = _config("1.13")
    assert derive_patches(load_documents(config), load_documents(config)) == ("", "")
    assert first_difference(config, config) == ""
    absent = differences(load_documents(config), [])
    assert absent == ["the v1alpha1 document (absent)", "HostnameConfig (absent)"]
