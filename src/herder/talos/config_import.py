"""Taking over running machine configs: the secrets bundle read back out of a control plane's config, the
patch that turns the config herder generates into the one a machine runs, and where two configs differ.

Configs are compared as their documents (what Talos reads), not as text: two configs that say the same in
another key order or quoting are the same config.
"""

from __future__ import annotations

from typing import Any

from herder.talos import pki
from herder.talos.documents import LEGACY_KIND, document_id, dump_documents, load_documents
from herder.talos.pki import CertificateAndKey
from herder.talos.secrets import InvalidSecrets, SecretsBundle

Documents = list[dict[str, Any]]


def field_at(root: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(root, dict):
            return None
        root = root.get(part)
    return root


def _by_kind(documents: Documents) -> dict[str, dict[str, Any]]:
    return {document_id(d).kind: d for d in documents if isinstance(d, dict)}


def bundle_from_config(text: str) -> SecretsBundle:
    """The secrets bundle a control plane's config was generated from (contracts before 1.14 keep it in the
    v1alpha1 document; later ones in typed documents beside it); raises ``InvalidSecrets`` naming the
    first field it lacks."""
    docs = _by_kind(load_documents(text))
    legacy = docs.get(LEGACY_KIND, {})
    missing: list[str] = []

    def textfield_at(doc: dict[str, Any], path: str, name: str) -> str:
        value = field_at(doc, path)
        if not isinstance(value, str) or not value:
            missing.append(name)
            return ""
        return value

    def b64(doc: dict[str, Any], path: str, name: str) -> bytes:
        value = textfield_at(doc, path, name)
        try:
            return pki.b64decode(value, field=name) if value else b""
        except pki.PKIError as exc:
            raise InvalidSecrets(str(exc)) from None

    def pem(doc: dict[str, Any], path: str, name: str) -> bytes:
        return textfield_at(doc, path, name).encode()

    def pair(doc: dict[str, Any], path: str, name: str, *, encoded: bool = True) -> CertificateAndKey:
        if encoded:
            return CertificateAndKey(
                b64(doc, f"{path}.crt", f"{name}.crt"), b64(doc, f"{path}.key", f"{name}.key")
            )
        return CertificateAndKey(
            pem(doc, f"{path}.cert", f"{name}.cert"), pem(doc, f"{path}.key", f"{name}.key")
        )

    typed = "DiscoveryIdentityConfig" in docs
    if typed:
        identity = docs["DiscoveryIdentityConfig"]
        cluster_id = textfield_at(identity, "clusterID", "DiscoveryIdentityConfig.clusterID")
        cluster_secret = textfield_at(identity, "clusterSecret", "DiscoveryIdentityConfig.clusterSecret")
        k8s = pair(
            docs.get("KubeAPIServerCAConfig", {}),
            "issuingCA",
            "KubeAPIServerCAConfig.issuingCA",
            encoded=False,
        )
        aggregator = pair(
            docs.get("KubeAggregatorCAConfig", {}),
            "issuingCA",
            "KubeAggregatorCAConfig.issuingCA",
            encoded=False,
        )
        service_account = pem(
            docs.get("KubeServiceAccountConfig", {}),
            "issuer.privateKey",
            "KubeServiceAccountConfig.issuer.privateKey",
        )
        secretbox, aescbc = _typed_encryption(docs.get("KubeEtcdEncryptionConfig", {}))
        if not (secretbox or aescbc):
            missing.append("KubeEtcdEncryptionConfig.config")
    else:
        cluster_id = textfield_at(legacy, "cluster.id", "cluster.id")
        cluster_secret = textfield_at(legacy, "cluster.secret", "cluster.secret")
        k8s = pair(legacy, "cluster.ca", "cluster.ca")
        aggregator = pair(legacy, "cluster.aggregatorCA", "cluster.aggregatorCA")
        service_account = b64(legacy, "cluster.serviceAccount.key", "cluster.serviceAccount.key")
        secretbox = field_at(legacy, "cluster.secretboxEncryptionSecret") or ""
        aescbc = field_at(legacy, "cluster.aescbcEncryptionSecret") or ""
        if not (secretbox or aescbc):
            missing.append("cluster.secretboxEncryptionSecret")
    bundle = SecretsBundle(
        cluster_id=cluster_id,
        cluster_secret=cluster_secret,
        bootstrap_token=textfield_at(legacy, "cluster.token", "cluster.token"),
        trustd_token=textfield_at(legacy, "machine.token", "machine.token"),
        etcd=pair(legacy, "cluster.etcd.ca", "cluster.etcd.ca"),
        k8s=k8s,
        k8s_aggregator=aggregator,
        k8s_service_account_key=service_account,
        os=pair(legacy, "machine.ca", "machine.ca"),
        secretbox_encryption_secret=str(secretbox),
        aescbc_encryption_secret=str(aescbc),
    )
    if missing:
        raise InvalidSecrets(f"the config lacks {missing[0]}: is it a control plane's?")
    return bundle


def _typed_encryption(doc: dict[str, Any]) -> tuple[str, str]:
    """The secretbox and aescbc secrets of a ``KubeEtcdEncryptionConfig`` (keys ``key2`` and ``key1``)."""
    found = {"key2": "", "key1": ""}
    for resources in field_at(doc, "config.resources") or ():
        for provider in resources.get("providers") or ():
            for key in field_at(provider, "secretbox.keys") or ():
                if key.get("name") in found:
                    found[key["name"]] = key.get("secret", "")
    return found["key2"], found["key1"]


def same_config(a: str, b: str) -> bool:
    """Whether two configs say the same (their documents are equal)."""
    return load_documents(a) == load_documents(b)


def differences(generated: Documents, running: Documents) -> list[str]:
    """Every field (``Kind.path``, the v1alpha1 document's without a kind) where the running config differs
    from the generated one."""
    out: list[str] = []
    gen, run = _keyed(generated), _keyed(running)
    for key in dict.fromkeys([*gen, *run]):
        label = _label(key)
        if key not in run:
            out.append(f"{label} (absent)" if label else "the v1alpha1 document (absent)")
        elif key not in gen:
            out.append(f"{label or 'v1alpha1'} (only on the machine)")
        else:
            _diff_fields(gen[key], run[key], [label] if label else [], out)
    return out


def _diff_fields(a: Any, b: Any, path: list[str], out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in dict.fromkeys([*a, *b]):
            if a.get(key) != b.get(key):
                _diff_fields(a.get(key), b.get(key), [*path, str(key)], out)
    elif a != b:
        out.append(".".join(path))


def _keyed(documents: Documents) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for doc in documents:
        ident = document_id(doc)
        out[(ident.kind, ident.name or "")] = doc
    return out


def _label(key: tuple[str, str]) -> str:
    kind, name = key
    if kind == LEGACY_KIND:
        return ""
    return f"{kind}[{name}]" if name else kind


def derive_patches(generated: Documents, running: Documents) -> tuple[str, str]:
    """Two strategic merge patches that, applied in order to ``generated``, give ``running``: the first
    deletes every field and document whose value differs (so that a list is replaced, not appended to, and
    an empty value is not ignored), the second sets the running values. Either is '' when not needed."""
    deletes: Documents = []
    sets: Documents = []
    gen, run = _keyed(generated), _keyed(running)
    for key, doc in gen.items():
        head = _head(doc)
        if key not in run:
            deletes.append({**head, "$patch": "delete"})
            continue
        removed, added = _fields(doc, run[key], top=True)
        if removed:
            deletes.append({**head, **removed})
        if added:
            sets.append({**head, **added})
    for key, doc in run.items():
        if key not in gen:
            sets.append(doc)
    return (dump_documents(deletes) if deletes else "", dump_documents(sets) if sets else "")


def _head(doc: dict[str, Any]) -> dict[str, Any]:
    """What names a document in a patch: apiVersion, kind and name (the v1alpha1 one needs none)."""
    return {k: doc[k] for k in ("apiVersion", "kind", "name") if k in doc}


def _fields(
    a: dict[str, Any], b: dict[str, Any], *, top: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """What to delete from ``a`` and what to set after, to make it ``b``."""
    removed: dict[str, Any] = {}
    added: dict[str, Any] = {}
    for key in dict.fromkeys([*a, *b]):
        if top and key in ("apiVersion", "kind", "name"):
            continue
        if key in a and key in b and a[key] == b[key]:
            continue
        if isinstance(a.get(key), dict) and isinstance(b.get(key), dict):
            sub_removed, sub_added = _fields(a[key], b[key])
            if sub_removed:
                removed[key] = sub_removed
            if sub_added:
                added[key] = sub_added
            continue
        if key in a:
            removed[key] = {"$patch": "delete"}
        if key in b:
            added[key] = b[key]
    return removed, added


def first_difference(generated: str, running: str) -> str:
    """The first field where two configs differ, '' when they say the same."""
    found = differences(load_documents(generated), load_documents(running))
    return found[0] if found else ""
