"""Files the CLI reads and writes for the user: patch arguments, and private outputs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from herder.api import datadir
from herder.cli.errors import UsageFailure

# The output file argument that means standard output.
STDOUT = "-"


def write_private(path: Path, data: str | bytes) -> None:
    """Write ``data`` readable by the owner only: configs, talosconfigs, kubeconfigs and snapshots
    hold keys and tokens. Raises ``UsageFailure`` naming the path when it cannot be written."""
    if path.parent.exists() and not path.parent.is_dir():
        raise UsageFailure(f"cannot write {str(path)!r}: {str(path.parent)!r} is not a directory")
    raw = data.encode() if isinstance(data, str) else data
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        datadir.write_private(path, raw)
    except OSError as e:
        raise UsageFailure(f"cannot write {str(path)!r}: {e.strerror or e}") from None


def patch_texts(values: Sequence[str], flag: str) -> list[str]:
    """Patch flag values: inline YAML/JSON, or ``@FILE`` for a file's content."""
    texts = []
    for value in values:
        if value.startswith("@"):
            path = Path(value[1:])
            try:
                texts.append(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError) as e:
                raise UsageFailure(f"{flag}: cannot read patch file {str(path)!r}: {e}") from None
        else:
            texts.append(value)
    return texts
