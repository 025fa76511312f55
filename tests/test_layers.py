"""The README's layer table and the import contract ``make lint`` runs (``pyproject.toml``) say the same:
each package's row names exactly the layers its contract lets it import, and every package has a row."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import herder

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {path.name for path in Path(herder.__file__).parent.iterdir() if (path / "__init__.py").exists()}


def _table() -> dict[str, set[str] | None]:
    """Each package's row: the layers it may import (None: everything)."""
    rows = {}
    for line in (ROOT / "README.md").read_text().splitlines():
        found = re.match(r"\| `(\w+)` \| ([^|]+) \|", line)
        if found is not None and found.group(1) in PACKAGES:
            cell = found.group(2).strip()
            rows[found.group(1)] = None if cell == "everything" else set(re.findall(r"`(\w+)`", cell))
    return rows


def _contracts() -> dict[str, set[str]]:
    """Each package's forbidden contract, turned round: the packages it is not forbidden."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    allowed = {}
    for contract in config["contracts"]:
        if contract["type"] == "forbidden":
            (source,) = contract["source_modules"]
            name = source.removeprefix("herder.")
            forbidden = {module.removeprefix("herder.") for module in contract["forbidden_modules"]}
            allowed[name] = PACKAGES - forbidden - {name}
    return allowed


def test_every_package_has_a_row_and_the_rows_are_the_contract() -> None:
    table = _table()
    assert set(table) == PACKAGES
    contracts = _contracts()
    # Every package but the composition root is held to its row; the root may import everything.
    assert set(contracts) == PACKAGES - {"cli"} and table["cli"] is None
    assert {name: table[name] for name in contracts} == contracts


def test_the_contract_refuses_circles_everywhere() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (acyclic,) = (c for c in config["contracts"] if c["type"] == "acyclic_siblings")
    assert acyclic["ancestors"] == ["herder"] and acyclic["depth"] >= 5
