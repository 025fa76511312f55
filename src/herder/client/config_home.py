"""Where herder's client keeps what ``herder login`` writes: a kubeconfig and the credentials it refreshes."""

from __future__ import annotations

import os
from pathlib import Path


def config_dir() -> Path:
    """``herder`` under the user's config home (``$XDG_CONFIG_HOME``, or ``~/.config``): where ``herder
    login`` keeps its kubeconfig and credentials."""
    home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(home) / "herder"


def login_kubeconfig() -> Path:
    """The kubeconfig ``herder login`` writes by default."""
    return config_dir() / "kubeconfig"
