"""Machine configs as an emulated machine reads them: validation as Talos would do it, the few facts the
emulator acts on, and whether a change can be applied without a reboot.

A parsed config is shared by every machine given the same bytes (configs are interned by digest), so a
thousand machines with one config cost one parse and one validation.
"""

from __future__ import annotations

import base64
import binascii
import copy
import difflib
import hashlib
import weakref
from dataclasses import dataclass
from typing import Any

import yaml

from herder.talos.config_cas import ConfigCAs, config_cas
from herder.talos.contracts import SUPPORTED, VersionContract
from herder.talos.documents import dump_documents, is_legacy, load_documents
from herder.talos.pki import CertificateAndKey, ca_bundle
from herder.talos.validate import check_documents


class ConfigError(ValueError):
    """A config the machine refuses; the message reads as Talos's would."""


@dataclass(frozen=True, eq=False)
class MachineConfig:
    """An applied config: its bytes, and what the emulator needs to know about it."""

    raw: bytes
    digest: str
    machine_type: str
    cluster_id: str
    cluster_name: str
    endpoint: str
    os_ca: CertificateAndKey
    """The Talos API CA (workers carry the certificate only)."""
    token: str
    """The trustd token workers present to obtain their API certificate."""
    hostname: str
    cert_sans: tuple[str, ...]
    install_image: str
    kubernetes_ca: CertificateAndKey | None
    has_etcd_ca: bool
    rbac: bool
    warnings: tuple[str, ...] = ()
    cas: ConfigCAs | None = None
    """Every CA the config makes the machine trust (``acceptedCAs`` besides the issuing ones)."""

    @property
    def talos_client_ca(self) -> bytes:
        """What apid verifies client certificates against: the Talos CA and those it accepts besides."""
        accepted = self.cas.talos_accepted if self.cas is not None else ()
        return ca_bundle(self.os_ca.crt, *accepted)

    @property
    def kubernetes_accepted(self) -> tuple[bytes, ...]:
        """The CAs kube-apiserver accepts client certificates of besides its issuing one."""
        return self.cas.kubernetes_accepted if self.cas is not None else ()

    @property
    def is_control_plane(self) -> bool:
        return self.machine_type in ("controlplane", "init")

    @property
    def text(self) -> str:
        return self.raw.decode("utf-8")

    def documents(self) -> list[Any]:
        return load_documents(self.text)


_interned: weakref.WeakValueDictionary[tuple[str, str], MachineConfig] = weakref.WeakValueDictionary()


def parse_config(raw: bytes, talos_version: str) -> MachineConfig:
    """The config, validated as a machine running ``talos_version`` would; raises ``ConfigError``."""
    digest = hashlib.sha256(raw).hexdigest()
    key = (digest, talos_version)
    cached = _interned.get(key)
    if cached is not None:
        return cached
    config = _parse(raw, digest, talos_version)
    _interned[key] = config
    return config


def _parse(raw: bytes, digest: str, talos_version: str) -> MachineConfig:
    try:
        documents = load_documents(raw.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"failed to parse config: {' '.join(str(e).split())}") from None
    _validate(documents, talos_version)
    legacy = next((d for d in documents if isinstance(d, dict) and is_legacy(d)), None)
    if legacy is None:
        raise ConfigError("the machine configuration doesn't contain v1alpha1 config")
    typed = {str(d.get("kind")): d for d in documents if isinstance(d, dict) and not is_legacy(d)}
    machine = _map(legacy.get("machine"))
    cluster = _map(legacy.get("cluster"))
    machine_type = str(machine.get("type") or "")
    if machine_type not in ("controlplane", "worker", "init"):
        raise ConfigError(f"1 error occurred:\n\t* machine type {machine_type!r} is not valid\n\n")
    ca = _map(machine.get("ca"))
    os_ca = CertificateAndKey(crt=_b64(ca.get("crt")), key=_b64(ca.get("key")))
    if not os_ca.crt:
        raise ConfigError("1 error occurred:\n\t* machine.ca.crt is required\n\n")
    identity = _map(typed.get("DiscoveryIdentityConfig"))
    kube_cluster = _map(typed.get("KubeClusterConfig"))
    control_plane = _map(cluster.get("controlPlane"))
    cluster_id = str(cluster.get("id") or identity.get("clusterID") or "")
    if not cluster_id:
        # Without an id (a hand-written config), the Talos CA is what binds machines into one cluster.
        cluster_id = "ca-" + hashlib.sha256(os_ca.crt).hexdigest()[:32]
    network = _map(machine.get("network"))
    hostname = str(_map(typed.get("HostnameConfig")).get("hostname") or network.get("hostname") or "")
    features = _map(machine.get("features"))
    return MachineConfig(
        raw=raw,
        digest=digest,
        machine_type=machine_type,
        cluster_id=cluster_id,
        cluster_name=str(cluster.get("clusterName") or kube_cluster.get("clusterName") or ""),
        endpoint=str(control_plane.get("endpoint") or kube_cluster.get("endpoint") or ""),
        os_ca=os_ca,
        token=str(machine.get("token") or ""),
        hostname=hostname,
        cert_sans=tuple(str(s) for s in machine.get("certSANs") or ()),
        install_image=str(_map(machine.get("install")).get("image") or ""),
        kubernetes_ca=_kubernetes_ca(cluster, typed),
        has_etcd_ca=bool(_map(_map(cluster.get("etcd")).get("ca")).get("crt")),
        rbac=features.get("rbac", True) is not False,
        cas=config_cas(documents),
    )


def _validate(documents: list[Any], talos_version: str) -> None:
    """Talos accepts configs of its own contract and of every older one (a cluster keeps the contract it
    was created with), so the config is valid if one of those contracts accepts it."""
    try:
        newest = VersionContract.parse(talos_version)
    except ValueError:
        newest = SUPPORTED[-1]
    candidates = [c for c in reversed(SUPPORTED) if c <= newest]
    first_issues = None
    for contract in candidates:
        issues = check_documents(documents, contract)
        if not issues:
            return
        first_issues = first_issues or issues
    lines = "".join(f"\t* {issue}\n" for issue in first_issues or ())
    count = len(first_issues or ())
    noun = "error" if count == 1 else "errors"
    raise ConfigError(f"configuration validation failed: {count} {noun} occurred:\n{lines}\n")


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _b64(value: Any) -> bytes:
    if not value:
        return b""
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError("1 error occurred:\n\t* certificate data is not valid base64\n\n") from None


def _kubernetes_ca(cluster: dict[str, Any], typed: dict[str, Any]) -> CertificateAndKey | None:
    legacy = _map(cluster.get("ca"))
    if legacy.get("crt") and legacy.get("key"):
        return CertificateAndKey(crt=_b64(legacy["crt"]), key=_b64(legacy["key"]))
    issuing = _map(_map(typed.get("KubeAPIServerCAConfig")).get("issuingCA"))
    if issuing.get("cert") and issuing.get("key"):
        return CertificateAndKey(crt=str(issuing["cert"]).encode(), key=str(issuing["key"]).encode())
    return None


# What Talos 1.9 lets a running machine change without a reboot (Runtime.CanApplyImmediate): everything
# in the typed documents, and these parts of the v1alpha1 document.
_IMMEDIATE_TOP = ("debug", "cluster")
_IMMEDIATE_MACHINE = (
    "ca",
    "acceptedCAs",
    "time",
    "certSANs",
    "install",
    "network",
    "sysfs",
    "sysctls",
    "logging",
    "controlPlane",
    "kubelet",
    "kernel",
    "registries",
    "pods",
    "seccompProfiles",
    "nodeAnnotations",
    "nodeLabels",
    "nodeTaints",
)
_IMMEDIATE_FEATURES = (
    "kubernetesTalosAPIAccess",
    "kubePrism",
    "hostDNS",
    "imageCache",
    "nodeAddressSortAlgorithm",
)


def _reboot_relevant(legacy: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(legacy)
    for key in _IMMEDIATE_TOP:
        doc.pop(key, None)
    machine = doc.get("machine")
    if isinstance(machine, dict):
        for key in _IMMEDIATE_MACHINE:
            machine.pop(key, None)
        features = machine.get("features")
        if isinstance(features, dict):
            for key in _IMMEDIATE_FEATURES:
                features.pop(key, None)
    return doc


def reboot_required_diff(current: MachineConfig, new: MachineConfig) -> str:
    """Empty if ``new`` can replace ``current`` without a reboot, else the diff that needs one."""
    old_doc = next(d for d in current.documents() if isinstance(d, dict) and is_legacy(d))
    new_doc = next(d for d in new.documents() if isinstance(d, dict) and is_legacy(d))
    before, after = _reboot_relevant(old_doc), _reboot_relevant(new_doc)
    if before == after:
        return ""
    return config_diff(dump_documents([before]), dump_documents([after]))


def config_diff(before: str, after: str) -> str:
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), "current", "new", lineterm="", n=2)
    return "\n".join(lines)
