"""Config validation: Talos's goldens are valid for their contracts; broken configs are refused with the
document, the path and the reason."""

from __future__ import annotations

import hashlib
import time
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from herder.talos.contracts import SUPPORTED, UnknownTalosVersion, VersionContract
from herder.talos.documents import dump_documents, load_documents
from herder.talos.validate import ConfigInvalid, ConfigIssue, check_config, check_documents, validate_config
from tests.data import TALOS

GOLDENS = sorted((TALOS / "golden").glob("v*/*.yaml"))


def _golden(contract: str, name: str) -> list[Any]:
    return load_documents((TALOS / "golden" / f"v{contract}" / f"{name}.yaml").read_text())


def _issues(documents: list[Any], contract: str) -> list[ConfigIssue]:
    return check_config(dump_documents(documents), contract)


def _without(documents: list[Any], kind: str) -> list[Any]:
    return [d for d in documents if d.get("kind") != kind]


@pytest.mark.parametrize("golden", GOLDENS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_goldens_are_valid_for_their_contract(golden: Path) -> None:
    contract = golden.parent.name.removeprefix("v")
    assert check_config(golden.read_text(), contract) == []
    validate_config(golden.read_text(), VersionContract.parse(contract))


def test_every_contract_has_goldens_and_a_shipped_schema() -> None:
    assert sorted({p.parent.name for p in GOLDENS}) == sorted(f"v{c}" for c in SUPPORTED)
    # The schemas herder ships are byte for byte the ones the Talos branches publish (their digests).
    shipped = resources.files("herder.talos").joinpath("schemas")
    published = dict(
        reversed(line.split()) for line in (TALOS / "schemas.sha256").read_text().splitlines() if line
    )
    assert {p.name for p in shipped.iterdir() if p.name.endswith(".json")} == published.keys()
    for name, digest in published.items():
        assert hashlib.sha256(shipped.joinpath(name).read_bytes()).hexdigest() == digest


def test_a_newer_schema_refuses_what_only_an_older_contract_knows() -> None:
    # The 1.14 schema has no machine.features.kubePrism: a 1.12 config is only valid for its own contract
    # (and later ones, which still decode it) — but a 1.14 kind is unknown to 1.12.
    issues = check_config((TALOS / "golden" / "v1.14" / "base-worker.yaml").read_text(), "1.12")
    assert (
        ConfigIssue("KubeClusterConfig", "kind", "unknown document kind KubeClusterConfig for Talos 1.12")
        in issues
    )


def test_fields_a_release_hides_but_accepts_are_valid() -> None:
    [legacy, *rest] = _golden("1.12", "overrides-worker")
    assert legacy["machine"]["install"]["extraKernelArgs"]
    assert _issues([legacy, *rest], "1.12") == []


def test_kind_enum_quirks_are_corrected() -> None:
    docs = _golden("1.11", "base-worker")
    endpoints = {
        "apiVersion": "v1alpha1",
        "kind": "KubeSpanEndpointsConfig",
        "extraAnnouncedEndpoints": ["1.2.3.4:51820"],
    }
    assert _issues([*docs, endpoints], "1.11") == []
    misspelt = {**endpoints, "kind": "KubeSpanEndpoints"}
    assert _issues([*docs, misspelt], "1.11") == [
        ConfigIssue("KubeSpanEndpoints", "kind", "unknown document kind KubeSpanEndpoints for Talos 1.11")
    ]


def test_contract_may_be_a_full_version_and_unknown_ones_are_refused() -> None:
    text = (TALOS / "golden" / "v1.13" / "base-worker.yaml").read_text()
    assert check_config(text, "v1.13.4") == []
    with pytest.raises(UnknownTalosVersion):
        check_config(text, "1.2")


def _mutated(contract: str, name: str, path: str, value: Any) -> list[Any]:
    docs = _golden(contract, name)
    *parents, last = path.split(".")
    node = docs[0]
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return docs


@pytest.mark.parametrize(
    ("docs", "contract", "expected"),
    [
        (
            _mutated("1.11", "base-worker", "machine.frobnicate", True),
            "1.11",
            ConfigIssue("v1alpha1", "machine.frobnicate", "unknown field for Talos 1.11"),
        ),
        (
            _mutated("1.11", "base-worker", "machine.certSANs", "a.example.com"),
            "1.11",
            ConfigIssue("v1alpha1", "machine.certSANs", "expected array, got string"),
        ),
        (
            _mutated("1.9", "base-worker", "machine.type", "janitor"),
            "1.9",
            ConfigIssue("v1alpha1", "machine.type", '"janitor" is not one of "controlplane", "worker"'),
        ),
        (
            _mutated("1.11", "base-controlplane", "cluster.controlPlane.endpoint", "base:6443"),
            "1.11",
            ConfigIssue(
                "v1alpha1", "cluster.controlPlane.endpoint", "invalid controlplane endpoint 'base:6443'"
            ),
        ),
        (
            _mutated(
                "1.11",
                "base-worker",
                "machine.network.interfaces",
                [{"interface": "eth0", "vip": {"ip": "10.0.0.9"}}],
            ),
            "1.11",
            ConfigIssue(
                "v1alpha1",
                "machine.network.interfaces[0]",
                "virtual (shared) IP is not allowed on non-controlplane nodes",
            ),
        ),
        (
            _mutated("1.11", "base-worker", "machine.ca.key", "LS0t"),
            "1.11",
            ConfigIssue("v1alpha1", "machine.ca.key", "issuing Talos API CA key is not allowed on workers"),
        ),
        (
            _mutated("1.12", "base-worker", "machine.network.hostname", "static"),
            "1.12",
            ConfigIssue(
                "HostnameConfig",
                "",
                "conflicts with .machine.network.hostname of the v1alpha1 document; configure only one",
            ),
        ),
        (
            [
                *_golden("1.12", "base-worker"),
                {"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": "sometimes"},
            ],
            "1.12",
            ConfigIssue("HostnameConfig", "auto", '"sometimes" is not one of "stable", "off"'),
        ),
        (
            [
                *_golden("1.12", "base-worker"),
                {"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": "off"},
            ],
            "1.12",
            ConfigIssue("HostnameConfig", "", "duplicate document"),
        ),
        (
            [
                *_golden("1.12", "base-worker"),
                {"apiVersion": "v1alpha1", "kind": "LinkConfig", "name": "eth0", "mtu": "big"},
            ],
            "1.12",
            ConfigIssue("LinkConfig/eth0", "mtu", "expected integer, got string"),
        ),
        (
            [
                *_golden("1.12", "base-worker"),
                {"apiVersion": "v1alpha1", "kind": "LinkConfig", "name": "eth0"},
                {"apiVersion": "v1alpha1", "kind": "DummyLinkConfig", "name": "eth0"},
            ],
            "1.12",
            ConfigIssue("DummyLinkConfig/eth0", "", "conflicts with document LinkConfig/eth0"),
        ),
        (
            [
                *_golden("1.11", "base-worker"),
                {"apiVersion": "v1alpha1", "kind": "HostnameConfig", "auto": "off"},
            ],
            "1.11",
            ConfigIssue("HostnameConfig", "kind", "unknown document kind HostnameConfig for Talos 1.11"),
        ),
        (
            [*_golden("1.11", "base-worker"), {"auto": "off"}],
            "1.11",
            ConfigIssue("document 2", "kind", "missing kind"),
        ),
        (
            _golden("1.14", "base-worker")[1:],
            "1.14",
            ConfigIssue("v1alpha1", "", "the machine configuration has no v1alpha1 document"),
        ),
        (
            [*_golden("1.14", "base-worker"), _golden("1.14", "base-controlplane")[-1]],
            "1.14",
            ConfigIssue(
                "KubeCoreDNSConfig", "", "this document kind is only allowed on control plane machines"
            ),
        ),
        (
            _without(_golden("1.14", "base-controlplane"), "KubeEtcdEncryptionConfig"),
            "1.14",
            ConfigIssue(
                "KubeAPIServerCAConfig", "", "etcd encryption config is required on control plane machines"
            ),
        ),
        (
            [
                *_without(_golden("1.14", "base-worker"), "DiscoveryServiceConfig"),
                {"apiVersion": "v1alpha1", "kind": "KubeSpanConfig", "enabled": True},
            ],
            "1.14",
            ConfigIssue("KubeSpanConfig", "", "KubeSpan requires cluster discovery to be enabled"),
        ),
        (
            _without(_golden("1.14", "base-worker"), "DiscoveryIdentityConfig"),
            "1.14",
            ConfigIssue(
                "DiscoveryServiceConfig/default",
                "",
                "cluster discovery needs the cluster id (DiscoveryIdentityConfig.clusterID or .cluster.id)",
            ),
        ),
    ],
)
def test_broken_configs_name_document_path_and_reason(
    docs: list[Any], contract: str, expected: ConfigIssue
) -> None:
    issues = _issues(docs, contract)
    assert expected in issues
    with pytest.raises(ConfigInvalid) as caught:
        validate_config(dump_documents(docs), contract)
    assert expected in caught.value.issues
    assert str(expected) in str(caught.value)


def test_malformed_yaml_is_one_issue() -> None:
    [issue] = check_config("machine: [", "1.12")
    assert issue.document == "config"
    assert issue.reason.startswith("malformed YAML: ")


def test_yaml_12_scalars_as_talos_reads_them() -> None:
    # YAML 1.1 would read ``off`` as false and fail the HostnameConfig enum.
    text = (TALOS / "golden" / "v1.12" / "base-worker.yaml").read_text().replace("auto: stable", "auto: off")
    assert "auto: off" in text
    assert check_config(text, "1.12") == []


def test_thousand_configs_validate_in_a_few_seconds() -> None:
    parsed = [(load_documents(p.read_text()), p.parent.name.removeprefix("v")) for p in GOLDENS]
    for docs, contract in parsed:
        check_documents(docs, contract)  # compile the validators once
    started = time.monotonic()
    for index in range(1000):
        docs, contract = parsed[index % len(parsed)]
        check_documents(docs, contract)
    assert time.monotonic() - started < 10


def test_scalars_in_string_fields_are_accepted_as_talos_decodes_them() -> None:
    docs = _mutated(
        "1.11", "base-worker", "machine.sysctls", {"net.ipv4.ip_forward": 1, "vm.swappiness": 0.5}
    )
    assert _issues(docs, "1.11") == []
    docs = _mutated("1.11", "base-worker", "cluster.controlPlane.localAPIServerPort", "6443")
    assert _issues(docs, "1.11") == [
        ConfigIssue("v1alpha1", "cluster.controlPlane.localAPIServerPort", "expected integer, got string")
    ]
