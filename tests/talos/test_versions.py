"""Version policy: the Talos ↔ Kubernetes matrix, Talos upgrade windows, Kubernetes upgrade paths, and
the cluster rules (initial contract, strict allow-list, no downgrades)."""

from __future__ import annotations

import pytest

from herder.talos.versions import (
    Verdict,
    Version,
    check_compatibility,
    check_kubernetes_upgrade,
    check_talos_upgrade,
    compatible_kubernetes,
)


def test_versions_order_as_semver() -> None:
    ordered = ["1.9.0", "1.13.0-alpha.1", "1.13.0-alpha.2", "1.13.0-beta.1", "1.13.0", "v1.13.2", "1.14"]
    parsed = [Version.parse(v) for v in ordered]
    assert parsed == sorted(reversed(parsed))
    assert str(Version.parse("v1.13")) == "1.13.0"
    with pytest.raises(ValueError, match="invalid version 'latest'"):
        Version.parse("latest")


@pytest.mark.parametrize(
    ("talos", "kubernetes", "allowed"),
    [
        ("1.9.5", "1.27.0", True),
        ("1.9.5", "1.32.9", True),
        ("1.9.5", "1.26.15", False),
        ("1.9.5", "1.33.0", False),
        ("v1.13.2", "1.36.3", True),
        ("1.14.0-rc.1", "1.37.0-rc.0", True),
        ("1.15.0", "1.38.1", True),
        ("1.15.0", "1.32.0", False),
    ],
)
def test_compatibility_matrix(talos: str, kubernetes: str, allowed: bool) -> None:
    assert check_compatibility(talos, kubernetes).allowed is allowed


def test_incompatibility_names_the_window() -> None:
    assert check_compatibility("1.12.0", "1.29.4") == Verdict(
        False, "Kubernetes 1.29.4 is not supported by Talos 1.12.0 (it supports Kubernetes 1.30 to 1.35)"
    )
    assert check_compatibility("1.5.0", "1.27.0") == Verdict(
        False, "compatibility with Talos 1.5.0 is not known"
    )
    assert (
        check_compatibility("1.12.0", "one").reason
        == "Kubernetes: invalid version 'one': expected X.Y or vX.Y.Z"
    )


def test_compatible_kubernetes_lists_minors() -> None:
    assert compatible_kubernetes("1.13.4") == ["1.31", "1.32", "1.33", "1.34", "1.35", "1.36"]
    assert compatible_kubernetes("2.0.0") == []


@pytest.mark.parametrize(
    ("source", "target", "allowed"),
    [
        ("1.13.2", "1.13.4", True),  # patch upgrade
        ("1.13.4", "1.13.2", True),  # patch downgrade
        ("1.13.9", "1.15.0", True),  # skipping a minor inside the target's window
        ("1.11.3", "1.13.0", True),
        ("1.8.0", "1.10.0", True),
        ("1.12.0", "1.15.0", False),  # 1.15 installs over 1.13.0 <= host < 1.17.0
        ("1.14.1", "1.13.9", True),  # 1.13 installs over hosts < 1.15.0
        ("1.15.0", "1.13.9", False),
        ("1.13.0", "1.16.0", False),  # unknown target
        ("1.13.0", "1.13.0", True),
    ],
)
def test_talos_upgrade_windows(source: str, target: str, allowed: bool) -> None:
    assert check_talos_upgrade(source, target).allowed is allowed


def test_talos_upgrade_refusals_say_why() -> None:
    assert check_talos_upgrade("1.12.0", "1.15.0").reason == (
        "Talos 1.15.0 cannot be installed over Talos 1.12.0: it upgrades from 1.13.0 up to (not including) 1.17.0"
    )
    assert check_talos_upgrade("1.13.0", "1.16.0").reason == "upgrades to Talos 1.16.0 are not supported"
    assert (
        check_talos_upgrade("1.13.0", "next").reason
        == "Talos: invalid version 'next': expected X.Y or vX.Y.Z"
    )


def test_no_downgrade_below_the_initial_minor() -> None:
    verdict = check_talos_upgrade("1.14.1", "1.13.9", initial="1.14.0")
    assert not verdict
    assert verdict.reason.startswith("downgrading from version 1.14.1 to 1.13.9 is not supported")
    assert check_talos_upgrade("1.14.1", "1.14.0", initial="1.14.1")
    assert check_talos_upgrade("1.14.1", "1.13.9", initial="1.12.5")


def test_strict_allow_list_and_no_downgrades_for_managed_clusters() -> None:
    allowed = ["1.13.4", "v1.14.0"]
    assert check_talos_upgrade("1.13.4", "1.14.0", allowed=allowed)
    refused = check_talos_upgrade("1.13.4", "1.13.5", allowed=allowed)
    assert refused == Verdict(False, "Talos 1.13.5 is not an allowed version (allowed: 1.13.4, v1.14.0)")
    downgrade = check_talos_upgrade("1.14.0", "1.13.4", allowed=allowed, allow_downgrade=False)
    assert downgrade.reason == "downgrading Talos from 1.14.0 to 1.13.4 is not allowed for this cluster"


def test_talos_upgrade_keeps_kubernetes_supported() -> None:
    assert check_talos_upgrade("1.13.0", "1.14.0", kubernetes="1.32.0")
    verdict = check_talos_upgrade("1.13.0", "1.14.0", kubernetes="1.31.4")
    assert (
        verdict.reason
        == "Kubernetes 1.31.4 is not supported by Talos 1.14.0 (it supports Kubernetes 1.32 to 1.37)"
    )


@pytest.mark.parametrize(
    ("source", "target", "allowed"),
    [
        ("1.30.1", "1.30.5", True),
        ("1.30.5", "1.30.1", True),  # patch downgrade within a minor
        ("1.30.5", "1.31.0", True),
        ("1.30.5", "1.32.0", False),  # skipping a minor
        ("1.31.0", "1.30.5", False),  # minor downgrade
        ("1.37.0", "1.38.0", False),  # no known path yet
        ("1.18.0", "1.19.0", False),
        ("1.30.5", "2.0.0", False),
    ],
)
def test_kubernetes_upgrade_paths(source: str, target: str, allowed: bool) -> None:
    assert check_kubernetes_upgrade(source, target).allowed is allowed


def test_kubernetes_upgrade_needs_every_node_to_support_the_target() -> None:
    assert check_kubernetes_upgrade("1.32.4", "1.33.1", talos=["1.10.3", "1.13.0"])
    verdict = check_kubernetes_upgrade("1.32.4", "1.33.1", talos=["1.13.0", "1.9.6"])
    assert (
        verdict.reason
        == "Kubernetes 1.33.1 is not supported by Talos 1.9.6 (it supports Kubernetes 1.27 to 1.32)"
    )
    assert check_kubernetes_upgrade("1.31.0", "1.33.0").reason == (
        "Kubernetes upgrade from 1.31 to 1.33 is not supported: upgrade one minor version at a time"
    )
    assert not check_kubernetes_upgrade("1.32.4", "1.33.1", allowed=["1.32.4"])
