"""The data directory: where it is by default, and the private files in it (keys, kubeconfigs).

Kept free of the server's imports, so that the command line can find a kubeconfig quickly.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import yaml

DEFAULT_LISTEN = "127.0.0.1:8443"
KUBECONFIG = "admin.kubeconfig"
ADMIN = "admin"


def default_data_dir() -> Path:
    """``herder`` under the user's data home (``$XDG_DATA_HOME``, or ``~/.local/share``)."""
    home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(home) / "herder"


def write_private(path: Path, data: bytes) -> None:
    """Write a file only its owner can read, replacing it atomically."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_kubeconfig(path: Path, server: str, ca_pem: bytes | None, token: str, user: str = ADMIN) -> None:
    """A kubeconfig (mode 0600) for ``server``, trusting ``ca_pem``, authenticating with ``token``."""
    cluster: dict[str, Any] = {"server": server}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "herder", "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "herder", "context": {"cluster": "herder", "user": user}}],
        "current-context": "herder",
    }
    write_private(path, yaml.safe_dump(doc, sort_keys=False).encode())
