"""Version policy: which Talos and Kubernetes versions go together, and which upgrades herder allows.

The facts are Talos's (``pkg/machinery/compatibility``), talosctl's Kubernetes upgrade paths
(``go-kubernetes`` ``upgrade/path.go``) and Omni's cluster rules:

- each Talos minor supports a window of Kubernetes minors, any patch of them;
- a Talos upgrade is checked by the target version's installer, so the target's window of host
  versions it may be installed over decides; minors may be skipped inside it, and downgrades are
  allowed back to versions whose window includes the host;
- Kubernetes moves one minor at a time: any patch within a minor, or up to the next minor;
- a cluster never goes below the Talos minor it was created with (its config contract);
- a managed cluster may only run versions of a strict allow-list, and never downgrades Talos.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from functools import total_ordering

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


@total_ordering
@dataclass(frozen=True)
class Version:
    """A semantic version (``v1.13.2``, ``1.13``, ``1.15.0-alpha.1``), ordered as semver orders them."""

    major: int
    minor: int
    patch: int = 0
    prerelease: str = ""

    @classmethod
    def parse(cls, text: str) -> Version:
        """Raises ``ValueError`` naming the text when it is not a version."""
        match = _VERSION.match(text.strip())
        if not match:
            raise ValueError(f"invalid version {text!r}: expected X.Y or vX.Y.Z")
        major, minor, patch, prerelease = match.groups()
        return cls(int(major), int(minor), int(patch or 0), prerelease or "")

    @property
    def minor_version(self) -> tuple[int, int]:
        return (self.major, self.minor)

    def _key(self) -> tuple[int, int, int, int, tuple[tuple[int, int | str], ...]]:
        # A pre-release sorts before its release; numeric identifiers sort before alphanumeric ones.
        identifiers = tuple(
            (0, int(part)) if part.isdigit() else (1, part) for part in self.prerelease.split(".") if part
        )
        return (self.major, self.minor, self.patch, 0 if self.prerelease else 1, identifiers)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        return f"{text}-{self.prerelease}" if self.prerelease else text


@dataclass(frozen=True)
class Verdict:
    """Whether a version or a version change is allowed; ``reason`` says why not."""

    allowed: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.allowed


ALLOWED = Verdict(True)


def _refused(reason: str) -> Verdict:
    return Verdict(False, reason)


@dataclass(frozen=True)
class _TalosRelease:
    kubernetes: tuple[tuple[int, int], tuple[int, int]]
    """Oldest and newest Kubernetes minor supported."""
    hosts: tuple[Version, Version]
    """Host versions it may be installed over: ``hosts[0] <= host < hosts[1]``."""


def _release(k8s_min: int, k8s_max: int, host_min: int, host_max: int) -> _TalosRelease:
    return _TalosRelease(((1, k8s_min), (1, k8s_max)), (Version(1, host_min), Version(1, host_max)))


TALOS_RELEASES: dict[tuple[int, int], _TalosRelease] = {
    (1, 6): _release(24, 29, 3, 8),
    (1, 7): _release(25, 30, 4, 9),
    (1, 8): _release(26, 31, 5, 10),
    (1, 9): _release(27, 32, 8, 11),
    (1, 10): _release(28, 33, 8, 12),
    (1, 11): _release(29, 34, 9, 13),
    (1, 12): _release(30, 35, 10, 14),
    (1, 13): _release(31, 36, 11, 15),
    (1, 14): _release(32, 37, 12, 16),
    (1, 15): _release(33, 38, 13, 17),
}
"""Per Talos minor: its Kubernetes window and the host versions it upgrades from."""

KUBERNETES_PATHS = ((1, 19), (1, 37))
"""Oldest and newest Kubernetes minor talosctl knows upgrade paths for (go-kubernetes v0.2.41)."""


def _minor(version: Version) -> str:
    return f"{version.major}.{version.minor}"


def _parse(text: str | Version, what: str) -> Version | Verdict:
    if isinstance(text, Version):
        return text
    try:
        return Version.parse(text)
    except ValueError as exc:
        return _refused(f"{what}: {exc}")


def check_compatibility(talos: str | Version, kubernetes: str | Version) -> Verdict:
    """Whether a Talos version runs a Kubernetes version."""
    talos_v, k8s_v = _parse(talos, "Talos"), _parse(kubernetes, "Kubernetes")
    if isinstance(talos_v, Verdict):
        return talos_v
    if isinstance(k8s_v, Verdict):
        return k8s_v
    release = TALOS_RELEASES.get(talos_v.minor_version)
    if release is None:
        return _refused(f"compatibility with Talos {talos_v} is not known")
    low, high = release.kubernetes
    if not low <= k8s_v.minor_version <= high:
        return _refused(
            f"Kubernetes {k8s_v} is not supported by Talos {talos_v} "
            f"(it supports Kubernetes {low[0]}.{low[1]} to {high[0]}.{high[1]})"
        )
    return ALLOWED


def check_talos_upgrade(
    from_version: str | Version,
    to_version: str | Version,
    *,
    initial: str | Version | None = None,
    allowed: Collection[str] | None = None,
    allow_downgrade: bool = True,
    kubernetes: str | Version | None = None,
) -> Verdict:
    """Whether a machine (or cluster) may move from one Talos version to another.

    ``initial`` is the Talos version the cluster was created with (no going below its minor);
    ``allowed`` a strict allow-list of versions; ``allow_downgrade=False`` refuses any move to an
    older version; ``kubernetes`` the cluster's Kubernetes version, which the target must support.
    """
    source, target = _parse(from_version, "Talos"), _parse(to_version, "Talos")
    if isinstance(source, Verdict):
        return source
    if isinstance(target, Verdict):
        return target
    if allowed is not None and str(target) not in {str(Version.parse(v)) for v in allowed}:
        listed = ", ".join(sorted(allowed, key=Version.parse)) or "none"
        return _refused(f"Talos {target} is not an allowed version (allowed: {listed})")
    if target == source:
        return ALLOWED
    if target < source and not allow_downgrade:
        return _refused(f"downgrading Talos from {source} to {target} is not allowed for this cluster")
    if initial is not None:
        first = _parse(initial, "initial Talos")
        if isinstance(first, Verdict):
            return first
        if target.minor_version < first.minor_version:
            return _refused(
                f"downgrading from version {source} to {target} is not supported: the cluster was created "
                f"with Talos {_minor(first)} and cannot go below it"
            )
    release = TALOS_RELEASES.get(target.minor_version)
    if release is None:
        return _refused(f"upgrades to Talos {target} are not supported")
    low, high = release.hosts
    if not low <= source < high:
        return _refused(
            f"Talos {target} cannot be installed over Talos {source}: it upgrades from {low} up to (not "
            f"including) {high}"
        )
    if kubernetes is not None:
        return check_compatibility(target, kubernetes)
    return ALLOWED


def check_kubernetes_upgrade(
    from_version: str | Version,
    to_version: str | Version,
    *,
    talos: Iterable[str | Version] = (),
    allowed: Collection[str] | None = None,
) -> Verdict:
    """Whether a cluster may move from one Kubernetes version to another.

    ``talos`` are the Talos versions its machines run; every one must support the target. ``allowed``
    is a strict allow-list of Kubernetes versions.
    """
    source, target = _parse(from_version, "Kubernetes"), _parse(to_version, "Kubernetes")
    if isinstance(source, Verdict):
        return source
    if isinstance(target, Verdict):
        return target
    if allowed is not None and str(target) not in {str(Version.parse(v)) for v in allowed}:
        listed = ", ".join(sorted(allowed, key=Version.parse)) or "none"
        return _refused(f"Kubernetes {target} is not an allowed version (allowed: {listed})")
    if target != source:
        verdict = _kubernetes_path(source, target)
        if not verdict:
            return verdict
    for version in talos:
        verdict = check_compatibility(version, target)
        if not verdict:
            return verdict
    return ALLOWED


def _kubernetes_path(source: Version, target: Version) -> Verdict:
    path = f"Kubernetes upgrade from {_minor(source)} to {_minor(target)}"
    oldest, newest = KUBERNETES_PATHS
    if target.minor_version < source.minor_version:
        return _refused(f"{path} is not supported: Kubernetes minor versions cannot be downgraded")
    if target.major != source.major or target.minor > source.minor + 1:
        return _refused(f"{path} is not supported: upgrade one minor version at a time")
    if source.minor_version < oldest or target.minor_version > newest:
        return _refused(f"{path} is not supported: no known upgrade path")
    return ALLOWED


def compatible_kubernetes(talos: str | Version) -> list[str]:
    """The Kubernetes minors a Talos version supports, oldest first; empty for an unknown Talos."""
    parsed = _parse(talos, "Talos")
    release = TALOS_RELEASES.get(parsed.minor_version) if isinstance(parsed, Version) else None
    if release is None:
        return []
    (major, low), (_, high) = release.kubernetes
    return [f"{major}.{minor}" for minor in range(low, high + 1)]
