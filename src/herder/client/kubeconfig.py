"""Reading a kubeconfig: the server URL, the CA to trust and the bearer token of its current context.

The token is the user's ``token`` or ``tokenFile``, or what its ``exec`` credential plugin answers
(``client.authentication.k8s.io`` ExecCredential): herder's own, ``herder auth exec-credential`` (which
kubeconfigs for people use), is answered in-process; any other is run as kubectl runs it.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class KubeconfigError(ValueError):
    """A kubeconfig that is missing, unreadable, or lacks what a client needs."""


@dataclass(frozen=True)
class Credentials:
    server: str
    token: str | None = None
    # PEM bytes of the CA to trust; None: the system's roots.
    ca_pem: bytes | None = None
    insecure: bool = False


def _named(entries: Any, name: str, what: str, path: Path) -> dict[str, Any]:
    for entry in entries or []:
        if isinstance(entry, dict) and entry.get("name") == name and isinstance(entry.get(what), dict):
            return entry[what]  # type: ignore[no-any-return]
    raise KubeconfigError(f"{path}: no {what} named {name!r}")


def load(path: str | Path, context: str | None = None) -> Credentials:
    path = Path(path).expanduser()
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as err:
        raise KubeconfigError(f"cannot read kubeconfig {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise KubeconfigError(f"{path} is not valid YAML: {err}") from None
    if not isinstance(doc, dict):
        raise KubeconfigError(f"{path} is not a kubeconfig")
    context = context or doc.get("current-context")
    if not context:
        raise KubeconfigError(f"{path}: no current-context")
    ctx = _named(doc.get("contexts"), context, "context", path)
    cluster = _named(doc.get("clusters"), ctx.get("cluster", ""), "cluster", path)
    user = _named(doc.get("users"), ctx.get("user", ""), "user", path) if ctx.get("user") else {}
    server = cluster.get("server")
    if not server:
        raise KubeconfigError(f"{path}: cluster {ctx.get('cluster')!r} has no server")
    ca: bytes | None = None
    if cluster.get("certificate-authority-data"):
        ca = base64.b64decode(cluster["certificate-authority-data"])
    elif cluster.get("certificate-authority"):
        ca_path = (path.parent / cluster["certificate-authority"]).expanduser()
        try:
            ca = ca_path.read_bytes()
        except OSError as err:
            raise KubeconfigError(f"cannot read the CA file {ca_path}: {err.strerror}") from None
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = Path(user["tokenFile"]).expanduser().read_text().strip()
    if not token and isinstance(user.get("exec"), dict):
        token = exec_token(user["exec"], path)
    return Credentials(server.rstrip("/"), token, ca, bool(cluster.get("insecure-skip-tls-verify")))


def cluster_of(path: str | Path) -> tuple[str, bytes | None]:
    """The server and CA of a kubeconfig's current context, without its credentials."""
    path = Path(path).expanduser()
    try:
        doc = yaml.safe_load(path.read_text())
        ctx = _named(doc.get("contexts"), doc.get("current-context") or "", "context", path)
        cluster = _named(doc.get("clusters"), ctx.get("cluster", ""), "cluster", path)
    except (OSError, yaml.YAMLError, AttributeError) as err:
        raise KubeconfigError(f"cannot read kubeconfig {path}: {err}") from None
    data = cluster.get("certificate-authority-data")
    return str(cluster.get("server", "")).rstrip("/"), base64.b64decode(data) if data else None


def exec_token(plugin: dict[str, Any], path: Path) -> str:
    """The bearer token a kubeconfig's exec credential plugin gives."""
    command = str(plugin.get("command") or "")
    args = [str(a) for a in plugin.get("args") or []]
    if Path(command).name == "herder" and args[:2] == ["auth", "exec-credential"] and "--server" in args:
        # Imported when a kubeconfig asks for it: the sign-in client is heavy for a command's start.
        from herder.client.sign_in import SignInError, token_for

        server = args[args.index("--server") + 1] if args.index("--server") + 1 < len(args) else ""
        try:
            return token_for(server).token
        except SignInError as exc:
            raise KubeconfigError(str(exc)) from None
    env = {**os.environ, **{str(e["name"]): str(e["value"]) for e in plugin.get("env") or [] if "name" in e}}
    env["KUBERNETES_EXEC_INFO"] = json.dumps(
        {"apiVersion": plugin.get("apiVersion"), "kind": "ExecCredential", "spec": {"interactive": False}}
    )
    try:
        done = subprocess.run([command, *args], capture_output=True, text=True, env=env, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KubeconfigError(f"{path}: the credential plugin {command!r} failed: {exc}") from None
    if done.returncode != 0:
        raise KubeconfigError(
            f"{path}: the credential plugin {command!r} failed: {done.stderr.strip()[-500:]}"
        )
    try:
        token = json.loads(done.stdout)["status"]["token"]
    except (ValueError, KeyError, TypeError):
        raise KubeconfigError(
            f"{path}: the credential plugin {command!r} gave no ExecCredential token"
        ) from None
    return str(token)


# Where herder serves the clusters' Kubernetes APIs: ``PROXY_PREFIX/NAMESPACE/NAME``.
PROXY_PREFIX = "/k8s/clusters"


def proxied(path: str | Path, cluster: str, namespace: str) -> str:
    """A kubeconfig for one cluster's Kubernetes API through herder's proxy, from the kubeconfig of
    herder's API at ``path``: herder's server and CA with the cluster's path, and the same user (its
    token, or its exec plugin) — so access lives and dies with that herder credential."""
    path = Path(path).expanduser()
    doc = yaml.safe_load(path.read_text())
    ctx = _named(doc.get("contexts"), doc.get("current-context") or "", "context", path)
    source = _named(doc.get("clusters"), ctx.get("cluster", ""), "cluster", path)
    user = _named(doc.get("users"), ctx.get("user", ""), "user", path) if ctx.get("user") else {}
    credentials = load(path)
    if user.get("tokenFile") and not user.get("token"):
        user = {**user, "tokenFile": str((path.parent / user["tokenFile"]).expanduser())}
    return proxy_kubeconfig(
        credentials.server,
        credentials.ca_pem,
        cluster,
        namespace,
        user,
        insecure=bool(source.get("insecure-skip-tls-verify")),
    )


def proxy_kubeconfig(
    server: str,
    ca_pem: bytes | None,
    cluster: str,
    namespace: str,
    user: dict[str, Any],
    *,
    insecure: bool = False,
) -> str:
    """A kubeconfig for ``cluster``'s Kubernetes API through the proxy of herder at ``server`` (trusting
    ``ca_pem``), as the kubeconfig ``user`` (a token, a token file or an exec plugin)."""
    entry: dict[str, Any] = {"server": f"{server.rstrip('/')}{PROXY_PREFIX}/{namespace}/{cluster}"}
    if ca_pem is not None:
        entry["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    if insecure:
        entry["insecure-skip-tls-verify"] = True
    name = f"{cluster}" if namespace == "default" else f"{namespace}-{cluster}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": entry}],
        "users": [{"name": f"{name}-user", "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": f"{name}-user"}}],
        "current-context": name,
    }
    return yaml.safe_dump(config, sort_keys=False)
