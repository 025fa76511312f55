"""Plain text output of the command line: columns aligned under a header, as kubectl prints them. Kept
free of rich, which the everyday commands do not load."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def columns(rows: Iterable[Sequence[str]], header: Sequence[str] | None = None, *, indent: str = "") -> str:
    """``rows`` (and the ``header`` above them) as left-aligned columns three spaces apart."""
    lines = [list(header)] if header is not None else []
    lines += [list(row) for row in rows]
    if not lines:
        return ""
    widths = [max(len(line[i]) if i < len(line) else 0 for line in lines) for i in range(len(lines[0]))]
    return "\n".join(
        indent + "   ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=False)).rstrip()
        for line in lines
    )
