"""Config generation: equal to Talos's own goldens for every contract, and each input lands where that
contract's Talos expects it."""

from __future__ import annotations

from typing import Any

import pytest

from herder.talos.contracts import SUPPORTED, VersionContract
from herder.talos.documents import document_id, load_documents
from herder.talos.generate import (
    ConfigInput,
    GenerateError,
    MachineType,
    generate_bundle,
    generate_config,
    generate_documents,
)
from herder.talos.generate_input import endpoint_host
from herder.talos.secrets import SecretsBundle, generate_secrets, load_secrets_file
from herder.talos.validate import check_config
from tests.data import TALOS

GOLDEN = TALOS / "golden"
SECRETS = load_secrets_file(GOLDEN / "secrets.yaml")
GOLDEN_CONTRACTS = sorted(
    VersionContract.parse(p.name) for p in GOLDEN.iterdir() if p.is_dir() and p.name.startswith("v")
)


def base_input(contract: VersionContract, secrets: SecretsBundle = SECRETS, **overrides: Any) -> ConfigInput:
    fields: dict[str, Any] = {
        "cluster_name": "base",
        "endpoint": "https://base:6443",
        "kubernetes_version": "1.28.0",
        "contract": contract,
        "secrets": secrets,
    }
    return ConfigInput(**(fields | overrides))


def overrides_input(contract: VersionContract) -> ConfigInput:
    """The "overrides" inputs of the golden files (tests/data/talos/README.md)."""
    return base_input(
        contract,
        additional_sans=["foo", "bar"],
        allow_scheduling_on_control_planes=True,
        dns_domain="example.com",
        install_disk="/dev/vda",
        install_extra_kernel_args=["foo=bar", "bar=baz"],
        local_api_server_port=5443,
        sysctls={"foo": "bar"},
        custom_cni_url="https://example.com/cni.yaml",
        registry_mirrors={"ghcr.io": ["https://ghcr.io.my-mirror.com"]},
    )


def golden(contract: VersionContract, name: str) -> list[Any]:
    return load_documents((GOLDEN / f"v{contract}" / f"{name}.yaml").read_text())


def kinds(documents: list[dict[str, Any]]) -> list[str]:
    return [d.get("kind", "v1alpha1") for d in documents]


def find(documents: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in documents if d.get("kind") == kind]
    return found


def test_every_supported_contract_has_a_golden() -> None:
    assert list(SUPPORTED) == GOLDEN_CONTRACTS


@pytest.mark.parametrize("contract", GOLDEN_CONTRACTS, ids=str)
@pytest.mark.parametrize("machine_type", list(MachineType), ids=str)
def test_base_equals_golden(contract: VersionContract, machine_type: MachineType) -> None:
    generated = load_documents(generate_config(base_input(contract), machine_type))
    assert generated == golden(contract, f"base-{machine_type}")


@pytest.mark.parametrize("contract", GOLDEN_CONTRACTS, ids=str)
def test_overrides_with_patch_equal_golden(contract: VersionContract) -> None:
    patch = (GOLDEN / ("patch.yaml" if contract.at_least(1, 14) else "patch-pre14.yaml")).read_text()
    bundle = generate_bundle(overrides_input(contract), patches=[patch])
    assert load_documents(bundle.controlplane) == golden(contract, "overrides-controlplane")
    assert load_documents(bundle.worker) == golden(contract, "overrides-worker")


@pytest.mark.parametrize("contract", SUPPORTED, ids=str)
def test_fresh_configs_have_unique_documents_and_no_ca_keys_on_workers(contract: VersionContract) -> None:
    secrets = generate_secrets(contract)
    worker_text = generate_config(base_input(contract, secrets), MachineType.WORKER)
    for machine_type in MachineType:
        documents = generate_documents(base_input(contract, secrets), machine_type)
        ids = [document_id(d) for d in documents]
        assert len(set(ids)) == len(ids)
        assert documents[0]["machine"]["type"] == machine_type
    assert secrets.os.key.decode() not in worker_text
    assert "PRIVATE KEY" not in worker_text
    assert documents[0]["machine"]["ca"]["key"] == ""


VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "everything": {
        "additional_sans": ["api.example", "10.0.0.10"],
        "allow_scheduling_on_control_planes": True,
        "dns_domain": "example.com",
        "install_disk": "/dev/nvme0n1",
        "install_image": "ghcr.io/siderolabs/installer:v1.12.0",
        "install_extra_kernel_args": ["console=ttyS0"],
        "local_api_server_port": 5443,
        "sysctls": {"net.core.somaxconn": "65535"},
        "custom_cni_url": "https://example.com/cni.yaml",
        "registry_mirrors": {"docker.io": ["https://mirror.example"], "ghcr.io": ["https://a", "https://b"]},
        "kubespan": True,
    },
    "no-discovery": {"discovery": False},
}


@pytest.mark.parametrize("contract", SUPPORTED, ids=str)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_generated_configs_pass_talos_validation(contract: VersionContract, variant: str) -> None:
    inp = base_input(contract, **VARIANTS[variant])
    for machine_type in MachineType:
        assert check_config(generate_config(inp, machine_type), contract) == []


def test_endpoint_host_is_in_api_server_sans_only_before_1_12() -> None:
    old = generate_documents(base_input(VersionContract(1, 11)), MachineType.CONTROLPLANE)[0]
    new = generate_documents(base_input(VersionContract(1, 12)), MachineType.CONTROLPLANE)[0]
    assert old["cluster"]["apiServer"]["certSANs"] == ["base"]
    assert "certSANs" not in new["cluster"]["apiServer"]


@pytest.mark.parametrize(
    ("contract", "expected"),
    [
        (VersionContract(1, 12), "legacy"),
        (VersionContract(1, 13), "document"),
        (VersionContract(1, 15), "document"),
    ],
    ids=str,
)
def test_kubespan_moves_to_its_document_at_1_13(contract: VersionContract, expected: str) -> None:
    for machine_type in MachineType:
        documents = generate_documents(base_input(contract, kubespan=True), machine_type)
        legacy_network = documents[0]["machine"].get("network")
        if expected == "legacy":
            assert legacy_network == {"kubespan": {"enabled": True}}
            assert "KubeSpanConfig" not in kinds(documents)
        else:
            assert legacy_network is None
            assert find(documents, "KubeSpanConfig") == {
                "apiVersion": "v1alpha1",
                "kind": "KubeSpanConfig",
                "enabled": True,
            }
    without = generate_documents(base_input(contract), MachineType.WORKER)
    assert "KubeSpanConfig" not in kinds(without)


def test_discovery_off() -> None:
    legacy = generate_documents(base_input(VersionContract(1, 13), discovery=False), MachineType.WORKER)
    assert legacy[0]["cluster"]["discovery"]["enabled"] is False
    multidoc = generate_documents(base_input(VersionContract(1, 14), discovery=False), MachineType.WORKER)
    assert "DiscoveryServiceConfig" not in kinds(multidoc)
    # The identity stays: KubeSpan and the cluster id still need it.
    assert find(multidoc, "DiscoveryIdentityConfig")["clusterID"] == SECRETS.cluster_id


def test_install_image_and_disk() -> None:
    image = "ghcr.io/siderolabs/installer:v1.13.0"
    legacy = generate_documents(
        base_input(VersionContract(1, 13), install_disk="/dev/nvme0n1", install_image=image),
        MachineType.WORKER,
    )
    assert legacy[0]["machine"]["install"] == {
        "disk": "/dev/nvme0n1",
        "image": image,
        "wipe": False,
        "grubUseUKICmdline": True,
    }
    multidoc = generate_documents(
        base_input(VersionContract(1, 14), install_disk="/dev/nvme0n1", install_image=image),
        MachineType.WORKER,
    )
    unattended = find(multidoc, "UnattendedInstallConfig")
    assert unattended["installer"] == {"image": image}
    assert unattended["provisioning"]["diskSelector"]["match"] == 'disk.dev_path == "/dev/nvme0n1"'


def test_registry_mirrors_are_sorted_by_host() -> None:
    mirrors = {"quay.io": ["https://q1", "https://q2"], "docker.io": ["https://d"]}
    legacy = generate_documents(
        base_input(VersionContract(1, 11), registry_mirrors=mirrors), MachineType.WORKER
    )
    assert list(legacy[0]["machine"]["registries"]["mirrors"]) == ["docker.io", "quay.io"]
    assert legacy[0]["machine"]["registries"]["mirrors"]["quay.io"] == {
        "endpoints": ["https://q1", "https://q2"]
    }
    multidoc = generate_documents(
        base_input(VersionContract(1, 12), registry_mirrors=mirrors), MachineType.WORKER
    )
    registry_docs = [d for d in multidoc if d.get("kind") == "RegistryMirrorConfig"]
    assert [d["name"] for d in registry_docs] == ["docker.io", "quay.io"]
    assert registry_docs[1]["endpoints"] == [{"url": "https://q1"}, {"url": "https://q2"}]


def test_aescbc_bundles_keep_their_secret() -> None:
    old = generate_secrets(VersionContract(1, 2))
    legacy = generate_documents(base_input(VersionContract(1, 13), old), MachineType.CONTROLPLANE)[0]
    assert legacy["cluster"]["aescbcEncryptionSecret"] == old.aescbc_encryption_secret
    assert "secretboxEncryptionSecret" not in legacy["cluster"]
    multidoc = generate_documents(base_input(VersionContract(1, 14), old), MachineType.CONTROLPLANE)
    providers = find(multidoc, "KubeEtcdEncryptionConfig")["config"]["resources"][0]["providers"]
    assert providers == [{"secretbox": {"keys": [{"name": "key1", "secret": old.aescbc_encryption_secret}]}}]


def test_scheduling_on_control_planes_drops_the_taint() -> None:
    tainted = find(
        generate_documents(base_input(VersionContract(1, 14)), MachineType.CONTROLPLANE), "KubeNodeConfig"
    )
    free = find(
        generate_documents(
            base_input(VersionContract(1, 14), allow_scheduling_on_control_planes=True),
            MachineType.CONTROLPLANE,
        ),
        "KubeNodeConfig",
    )
    assert tainted["taints"] == {"node-role.kubernetes.io/control-plane": "NoSchedule"}
    assert "taints" not in free


def test_kubernetes_version_with_v_prefix_is_accepted() -> None:
    config = generate_config(
        base_input(VersionContract(1, 13), kubernetes_version="v1.31.2"), MachineType.WORKER
    )
    assert "ghcr.io/siderolabs/kubelet:v1.31.2" in config
    assert "vv1" not in config


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"kubernetes_version": "1.28"}, "invalid Kubernetes version '1.28'"),
        ({"kubernetes_version": "latest"}, "invalid Kubernetes version"),
        ({"endpoint": "http://base:6443"}, "the scheme must be https"),
        ({"endpoint": "base:6443"}, "the scheme must be https"),
        ({"endpoint": "https://"}, "no host"),
        ({"cluster_name": " "}, "cluster name must not be empty"),
        ({"local_api_server_port": 70000}, "invalid local API server port"),
        ({"custom_cni_url": "cni.yaml"}, "invalid custom CNI URL"),
        ({"registry_mirrors": {"ghcr.io": []}}, "invalid registry mirror"),
        ({"kubespan": True, "discovery": False}, "KubeSpan requires cluster discovery"),
    ],
)
def test_bad_inputs_are_refused(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(GenerateError, match=message):
        base_input(VersionContract(1, 14), **overrides)


def test_endpoint_host() -> None:
    assert endpoint_host("https://Base.Example:6443") == "Base.Example"
    assert endpoint_host("https://[fd00::1]:6443") == "fd00::1"
    assert endpoint_host("https://10.0.0.1") == "10.0.0.1"


def test_patches_by_machine_type() -> None:
    # Contract 1.11 configs are single documents, which JSON 6902 patches need.
    bundle = generate_bundle(
        base_input(VersionContract(1, 11)),
        patches=["machine:\n  env:\n    ALL: '1'\n"],
        control_plane_patches=["cluster:\n  proxy:\n    disabled: true\n"],
        worker_patches=['[{"op": "add", "path": "/machine/nodeLabels", "value": {"role": "worker"}}]'],
    )
    (cp, *_) = load_documents(bundle.controlplane)
    (worker, *_) = load_documents(bundle.worker)
    assert cp["machine"]["env"] == worker["machine"]["env"] == {"ALL": "1"}
    assert cp["cluster"]["proxy"]["disabled"] is True
    assert "proxy" not in worker["cluster"]
    assert worker["machine"]["nodeLabels"] == {"role": "worker"}
    assert "role" not in cp["machine"]["nodeLabels"]
    assert bundle.talosconfig.context == "base"
