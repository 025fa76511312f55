"""talosconfig: the client configuration of the Talos API (talosctl's format), generated from a cluster's
secrets bundle or loaded from a file.

The client certificate is issued by the Talos API CA with an Ed25519 key (the CA's key type) and carries the
client's roles as its subject organizations, which is how apid authorizes a caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from herder.talos import pki
from herder.talos.documents import dump_documents, load_documents
from herder.talos.pki import CertificateAndKey, ExtUsage, Usage
from herder.talos.secrets import SecretsBundle

ROLES = (
    "os:admin",
    "os:operator",
    "os:reader",
    "os:etcd:backup",
    "os:image:verifier",
    "os:meta:writer",
    "os:impersonator",
)
"""Every role Talos's apid knows."""

CLIENT_CERT_LIFETIME = timedelta(days=365)
"""Talos's ``TalosAPIDefaultCertificateValidityDuration``."""


class TalosconfigError(ValueError):
    """A talosconfig that cannot be generated or read."""


@dataclass(frozen=True)
class TalosContext:
    """One context: where to reach the Talos API and the credentials to present (PEM, not base64)."""

    endpoints: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    ca: bytes = b""
    crt: bytes = b""
    key: bytes = b""
    cluster: str = ""


@dataclass(frozen=True)
class Talosconfig:
    context: str
    contexts: dict[str, TalosContext] = field(default_factory=dict)

    def current(self) -> TalosContext:
        """The selected context; raises ``TalosconfigError`` if it does not exist."""
        try:
            return self.contexts[self.context]
        except KeyError:
            raise TalosconfigError(f"talosconfig: context {self.context!r} is not defined") from None


def issue_client_certificate(
    talos_ca: CertificateAndKey,
    roles: Sequence[str] = ("os:admin",),
    *,
    lifetime: timedelta = CLIENT_CERT_LIFETIME,
    now: datetime | None = None,
) -> CertificateAndKey:
    """A Talos API client certificate for ``roles`` (sorted into the subject's organizations, no CN)."""
    unknown = sorted(set(roles) - set(ROLES))
    if unknown:
        raise TalosconfigError(
            f"unknown Talos role(s) {', '.join(unknown)}: known roles are {', '.join(ROLES)}"
        )
    if not roles:
        raise TalosconfigError("a Talos client certificate needs at least one role")
    not_before = now or datetime.now(UTC)
    return pki.issue_certificate(
        talos_ca,
        organizations=sorted(set(roles)),
        not_before=not_before,
        not_after=not_before + lifetime,
        usage=Usage.DIGITAL_SIGNATURE,
        ext_usage=ExtUsage.CLIENT_AUTH,
    )


def generate_talosconfig(
    secrets: SecretsBundle,
    context: str,
    *,
    endpoints: Sequence[str] = (),
    nodes: Sequence[str] = (),
    roles: Sequence[str] = ("os:admin",),
    lifetime: timedelta = CLIENT_CERT_LIFETIME,
    now: datetime | None = None,
) -> Talosconfig:
    """A talosconfig with one context named after the cluster, as ``talosctl gen config`` writes it. Its
    client key is under the standard PKCS#8 label (which OpenSSL and talosctl load), not Talos's own."""
    client = issue_client_certificate(secrets.os, roles, lifetime=lifetime, now=now)
    return Talosconfig(
        context=context,
        contexts={
            context: TalosContext(
                endpoints=tuple(endpoints),
                nodes=tuple(nodes),
                ca=secrets.os.crt,
                crt=client.crt,
                key=pki.standard_label(client.key),
            )
        },
    )


def dump_talosconfig(config: Talosconfig) -> str:
    contexts: dict[str, dict[str, Any]] = {}
    for name, ctx in config.contexts.items():
        entry: dict[str, Any] = {"endpoints": list(ctx.endpoints)}
        if ctx.nodes:
            entry["nodes"] = list(ctx.nodes)
        for key, value in (("ca", ctx.ca), ("crt", ctx.crt), ("key", ctx.key)):
            if value:
                entry[key] = pki.b64encode(value)
        if ctx.cluster:
            entry["cluster"] = ctx.cluster
        contexts[name] = entry
    return dump_documents([{"context": config.context, "contexts": contexts}])


def _strings(value: Any, path: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TalosconfigError(f"talosconfig: {path} must be a list of strings")
    return tuple(value)


def _blob(entry: dict[str, Any], key: str, path: str) -> bytes:
    value = entry.get(key) or ""
    if not isinstance(value, str):
        raise TalosconfigError(f"talosconfig: {path}.{key} must be a base64 string")
    try:
        return pki.b64decode(value, field=f"{path}.{key}")
    except pki.PKIError as e:
        raise TalosconfigError(f"talosconfig: {e}") from None


def load_talosconfig(text: str) -> Talosconfig:
    """Read a talosconfig (talosctl's format; the deprecated ``target`` counts as an endpoint)."""
    try:
        documents = load_documents(text)
    except yaml.YAMLError as e:
        raise TalosconfigError(f"talosconfig: not YAML: {pki.first_line(e)}") from None
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise TalosconfigError("talosconfig: expected one YAML mapping")
    root = documents[0]
    raw_contexts = root.get("contexts") or {}
    if not isinstance(raw_contexts, dict):
        raise TalosconfigError("talosconfig: contexts must be a mapping")
    contexts: dict[str, TalosContext] = {}
    for name, entry in raw_contexts.items():
        path = f"contexts.{name}"
        if not isinstance(entry, dict):
            raise TalosconfigError(f"talosconfig: {path} must be a mapping")
        endpoints = _strings(entry.get("endpoints"), f"{path}.endpoints")
        target = entry.get("target")
        if not endpoints and isinstance(target, str) and target:
            endpoints = (target,)
        contexts[str(name)] = TalosContext(
            endpoints=endpoints,
            nodes=_strings(entry.get("nodes"), f"{path}.nodes"),
            ca=_blob(entry, "ca", path),
            crt=_blob(entry, "crt", path),
            key=_blob(entry, "key", path),
            cluster=str(entry.get("cluster") or ""),
        )
    return Talosconfig(context=str(root.get("context") or ""), contexts=contexts)


def load_talosconfig_file(path: str | Path) -> Talosconfig:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TalosconfigError(f"cannot read talosconfig {str(path)!r}: {pki.first_line(e)}") from None
    return load_talosconfig(text)
