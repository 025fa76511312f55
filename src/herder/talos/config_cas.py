"""The CAs a machine config makes a machine trust, read from the config as Talos reads them: the Talos API's
issuing CA (``machine.ca``) and the ones it accepts besides (``machine.acceptedCAs``), and the same for
Kubernetes (``cluster.ca`` / ``cluster.acceptedCAs``, or from contract 1.14 the ``KubeAPIServerCAConfig``
document's ``issuingCA`` and ``acceptedCAs``).

A CA rotation reads it to tell which step a machine's config is at; the emulator, to know which client
certificates its apid and kube-apiserver accept.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from herder.talos.documents import is_legacy


@dataclass(frozen=True)
class ConfigCAs:
    """PEM certificates, without surrounding whitespace; ``*_issuing`` empty when the config names none."""

    talos_issuing: bytes
    talos_accepted: tuple[bytes, ...]
    kubernetes_issuing: bytes
    kubernetes_accepted: tuple[bytes, ...]

    def talos_trusted(self) -> tuple[bytes, ...]:
        """Every CA the Talos API accepts client certificates of."""
        return tuple(dict.fromkeys(c for c in (self.talos_issuing, *self.talos_accepted) if c))

    def kubernetes_trusted(self) -> tuple[bytes, ...]:
        return tuple(dict.fromkeys(c for c in (self.kubernetes_issuing, *self.kubernetes_accepted) if c))


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _b64(value: Any) -> bytes:
    try:
        return base64.b64decode(str(value or ""), validate=True).strip()
    except (binascii.Error, ValueError):
        return b""


def _crts(entries: Any) -> tuple[bytes, ...]:
    if not isinstance(entries, list):
        return ()
    return tuple(crt for crt in (_b64(_map(entry).get("crt")) for entry in entries) if crt)


def config_cas(documents: list[Any]) -> ConfigCAs:
    """The CAs of a parsed config (its documents, as ``load_documents`` gives them)."""
    legacy = next((_map(d) for d in documents if isinstance(d, dict) and is_legacy(d)), {})
    machine, cluster = _map(legacy.get("machine")), _map(legacy.get("cluster"))
    typed = next(
        (d for d in documents if isinstance(d, dict) and d.get("kind") == "KubeAPIServerCAConfig"), None
    )
    if typed is None:
        kubernetes_issuing = _b64(_map(cluster.get("ca")).get("crt"))
        kubernetes_accepted = _crts(cluster.get("acceptedCAs"))
    else:
        accepted = tuple(str(c).strip().encode() for c in typed.get("acceptedCAs") or () if c)
        issuing = str(_map(typed.get("issuingCA")).get("cert") or "").strip().encode()
        # A worker names no issuing CA: the first it accepts is the cluster's own.
        if not issuing and accepted:
            issuing, accepted = accepted[0], accepted[1:]
        kubernetes_issuing, kubernetes_accepted = issuing, accepted
    return ConfigCAs(
        talos_issuing=_b64(_map(machine.get("ca")).get("crt")),
        talos_accepted=_crts(machine.get("acceptedCAs")),
        kubernetes_issuing=kubernetes_issuing,
        kubernetes_accepted=kubernetes_accepted,
    )
