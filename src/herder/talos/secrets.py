"""The Talos secrets bundle of a cluster: generate it, and read and write it in talosctl's secrets YAML format
(``talosctl gen secrets``), which is also how herder stores it.

The bundle is generated for a version contract, as Talos does: the service account key is RSA-4096 from
contract 1.7 (ECDSA P-256 before), the API server encrypts with a secretbox secret from contract 1.3
(aescbc before), and the cluster id is standard base64 from 1.14 (URL-safe before).
"""

from __future__ import annotations

import base64
import os
import secrets as _random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from herder.talos import pki
from herder.talos.contracts import VersionContract
from herder.talos.documents import dump_documents, load_documents
from herder.talos.pki import CertificateAndKey, KeyType

_TOKEN_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


class InvalidSecrets(ValueError):
    """A secrets bundle that is malformed or incomplete; the message names every faulty field."""


@dataclass(frozen=True)
class SecretsBundle:
    cluster_id: str
    cluster_secret: str
    bootstrap_token: str
    trustd_token: str
    etcd: CertificateAndKey
    k8s: CertificateAndKey
    k8s_aggregator: CertificateAndKey
    k8s_service_account_key: bytes
    os: CertificateAndKey
    """The Talos API CA (``machine.ca``)."""
    secretbox_encryption_secret: str = ""
    aescbc_encryption_secret: str = ""


def generate_token() -> str:
    """A kubeadm-style token ``[a-z0-9]{6}.[a-z0-9]{16}``, as Talos makes bootstrap and trustd tokens."""
    pick = _random.choice
    return (
        "".join(pick(_TOKEN_ALPHABET) for _ in range(6))
        + "."
        + "".join(pick(_TOKEN_ALPHABET) for _ in range(16))
    )


def _random_b64() -> str:
    return base64.b64encode(os.urandom(32)).decode("ascii")


def encode_cluster_id(raw: bytes, contract: VersionContract) -> str:
    """Cluster ids are opaque, but Talos writes them URL-safe before contract 1.14 and standard from 1.14."""
    encode = base64.b64encode if contract.at_least(1, 14) else base64.urlsafe_b64encode
    return encode(raw).decode("ascii")


def service_account_key_type(contract: VersionContract) -> KeyType:
    """The key Talos signs Kubernetes service account tokens with: RSA-4096 from contract 1.7 on."""
    return KeyType.RSA_4096 if contract.at_least(1, 7) else KeyType.ECDSA_P256


def generate_secrets(
    contract: VersionContract,
    *,
    now: datetime | None = None,
    service_account_key: pki.PrivateKey | None = None,
) -> SecretsBundle:
    """A fresh bundle for ``contract``: new CAs valid from ``now`` for ten years, new tokens and secrets.

    ``service_account_key``, when given, is a fresh key of ``service_account_key_type(contract)`` made
    ahead of time (an RSA-4096 key takes about a second to make).
    """
    now = now or datetime.now(UTC)
    service_account = service_account_key or pki.generate_private_key(service_account_key_type(contract))
    encryption_secret = _random_b64()
    return SecretsBundle(
        cluster_id=encode_cluster_id(os.urandom(32), contract),
        cluster_secret=_random_b64(),
        bootstrap_token=generate_token(),
        trustd_token=generate_token(),
        etcd=pki.new_ca(KeyType.ECDSA_P256, organization="etcd", now=now),
        k8s=pki.new_ca(KeyType.ECDSA_P256, organization="kubernetes", now=now),
        # Talos asks for CN "front-proxy" here, but its CA constructor ignores common names: the subject is empty.
        k8s_aggregator=pki.new_ca(KeyType.ECDSA_P256, organization=None, now=now),
        k8s_service_account_key=pki.encode_private_key(service_account),
        os=pki.new_ca(KeyType.ED25519, organization="talos", now=now),
        secretbox_encryption_secret=encryption_secret if contract.at_least(1, 3) else "",
        aescbc_encryption_secret="" if contract.at_least(1, 3) else encryption_secret,
    )


def dump_secrets(bundle: SecretsBundle) -> str:
    """The bundle in talosctl's secrets YAML format."""
    secrets: dict[str, str] = {"bootstraptoken": bundle.bootstrap_token}
    if bundle.aescbc_encryption_secret:
        secrets["aescbcencryptionsecret"] = bundle.aescbc_encryption_secret
    if bundle.secretbox_encryption_secret:
        secrets["secretboxencryptionsecret"] = bundle.secretbox_encryption_secret
    return dump_documents(
        [
            {
                "cluster": {"id": bundle.cluster_id, "secret": bundle.cluster_secret},
                "secrets": secrets,
                "trustdinfo": {"token": bundle.trustd_token},
                "certs": {
                    "etcd": pki.b64_pair(bundle.etcd),
                    "k8s": pki.b64_pair(bundle.k8s),
                    "k8saggregator": pki.b64_pair(bundle.k8s_aggregator),
                    "k8sserviceaccount": {"key": pki.b64encode(bundle.k8s_service_account_key)},
                    "os": pki.b64_pair(bundle.os),
                },
            }
        ]
    )


class _Reader:
    """Walks the decoded YAML, collecting every problem so that one error names all faulty fields."""

    def __init__(self, root: Any, *, check_keys: bool = True) -> None:
        self.root = root
        self.check_keys = check_keys
        self.errors: list[str] = []

    def section(self, name: str) -> dict[str, Any] | None:
        value = self.root.get(name)
        if value is None:
            self.errors.append(f"{name} is required")
            return None
        if not isinstance(value, dict):
            self.errors.append(f"{name} must be a mapping")
            return None
        return value

    def string(self, section: dict[str, Any] | None, path: str, *, required: bool = True) -> str:
        if section is None:
            return ""
        value = section.get(path.rsplit(".", 1)[1])
        if value is None or value == "":
            if required:
                self.errors.append(f"{path} is required")
            return ""
        if not isinstance(value, str):
            self.errors.append(f"{path} must be a string")
            return ""
        return value

    def pem(self, section: dict[str, Any] | None, path: str) -> bytes:
        text = self.string(section, path)
        if not text:
            return b""
        try:
            return pki.b64decode(text, field=path)
        except pki.PKIError as e:
            self.errors.append(str(e))
            return b""

    def certificate_and_key(self, certs: dict[str, Any] | None, name: str) -> CertificateAndKey:
        empty = CertificateAndKey(crt=b"", key=b"")
        if certs is None:
            return empty
        entry = certs.get(name)
        if entry is None:
            self.errors.append(f"certs.{name} is required")
            return empty
        if not isinstance(entry, dict):
            self.errors.append(f"certs.{name} must be a mapping")
            return empty
        pair = CertificateAndKey(
            crt=self.pem(entry, f"certs.{name}.crt"), key=self.pem(entry, f"certs.{name}.key")
        )
        self.check(pki.load_certificate, pair.crt, f"certs.{name}.crt")
        self.check(pki.load_private_key, pair.key, f"certs.{name}.key")
        return pair

    def check(self, decode: Callable[[bytes], object], data: bytes, path: str) -> None:
        if not data or not self.check_keys:
            return
        try:
            decode(data)
        except pki.PKIError as e:
            self.errors.append(f"{path} is invalid: {e}")


def load_secrets(text: str, *, check_keys: bool = True) -> SecretsBundle:
    """Decode and validate a bundle in talosctl's secrets YAML format; raises ``InvalidSecrets``.

    ``check_keys=False`` skips decoding every certificate and key to check it (an RSA key's check costs
    a tenth of a second): for bundles this program made and kept sealed itself.
    """
    try:
        documents = load_documents(text)
    except yaml.YAMLError as e:
        raise InvalidSecrets(f"invalid secrets bundle: not YAML: {pki.first_line(e)}") from None
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise InvalidSecrets("invalid secrets bundle: expected one YAML mapping")
    root = documents[0]
    r = _Reader(root, check_keys=check_keys)
    cluster = r.section("cluster")
    cluster_id = r.string(cluster, "cluster.id")
    cluster_secret = r.string(cluster, "cluster.secret")
    secrets = r.section("secrets")
    bootstrap_token = r.string(secrets, "secrets.bootstraptoken")
    secretbox = r.string(secrets, "secrets.secretboxencryptionsecret", required=False)
    aescbc = r.string(secrets, "secrets.aescbcencryptionsecret", required=False)
    if secrets is not None and bool(secretbox) == bool(aescbc):
        which = "both" if secretbox else "neither"
        r.errors.append(
            "exactly one of secrets.secretboxencryptionsecret, secrets.aescbcencryptionsecret is required "
            f"({which} given)"
        )
    trustd_token = r.string(r.section("trustdinfo"), "trustdinfo.token")
    certs = r.section("certs")
    etcd = r.certificate_and_key(certs, "etcd")
    k8s = r.certificate_and_key(certs, "k8s")
    k8s_aggregator = r.certificate_and_key(certs, "k8saggregator")
    service_account = b""
    if certs is not None:
        sa = certs.get("k8sserviceaccount")
        if not isinstance(sa, dict):
            r.errors.append("certs.k8sserviceaccount is required")
        else:
            service_account = r.pem(sa, "certs.k8sserviceaccount.key")
            r.check(pki.load_private_key, service_account, "certs.k8sserviceaccount.key")
    talos_ca = r.certificate_and_key(certs, "os")
    bundle = SecretsBundle(
        cluster_id=cluster_id,
        cluster_secret=cluster_secret,
        bootstrap_token=bootstrap_token,
        trustd_token=trustd_token,
        etcd=etcd,
        k8s=k8s,
        k8s_aggregator=k8s_aggregator,
        k8s_service_account_key=service_account,
        os=talos_ca,
        secretbox_encryption_secret=secretbox,
        aescbc_encryption_secret=aescbc,
    )
    if r.errors:
        raise InvalidSecrets("invalid secrets bundle: " + "; ".join(dict.fromkeys(r.errors)))
    return bundle


def load_secrets_file(path: str | Path) -> SecretsBundle:
    """Read a bundle file; an unreadable file is an ``InvalidSecrets`` naming the path."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidSecrets(f"cannot read secrets bundle {str(path)!r}: {pki.first_line(e)}") from None
    try:
        return load_secrets(text)
    except InvalidSecrets as e:
        raise InvalidSecrets(f"{path}: {e}") from None


def save_secrets(bundle: SecretsBundle, path: str | Path) -> None:
    """Write the bundle readable by its owner only, as it holds every key of the cluster."""
    target = Path(path)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(dump_secrets(bundle))
