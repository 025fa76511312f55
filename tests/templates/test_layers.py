"""``herder.templates`` imports only ``resources`` and ``talos`` of herder (DESIGN §3), so the CLI, a
controller or a future server-side template API can all use it; and its reference page names every
field of the documents by what herder does with it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import herder.templates
from herder.templates.documents import field_catalogue

ROOT = Path(herder.templates.__file__).parent
DOCS = Path(__file__).resolve().parents[2] / "docs" / "templates.md"


def test_templates_import_only_resources_and_talos() -> None:
    for path in ROOT.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                if name.startswith("herder."):
                    layer = name.split(".")[1]
                    assert layer in ("resources", "talos", "templates"), f"{path.name} imports {name}"


def test_the_reference_page_names_every_field_by_its_fate() -> None:
    text = DOCS.read_text()
    sections = {
        "mapped": text[text.index("Mapped (") : text.index("Warned about")],
        "ignored": text[text.index("Warned about") : text.index("Refused, with")],
        "refused": text[text.index("Refused, with") : text.index("## Sync")],
    }
    for fate, fields in field_catalogue().items():
        for field in fields:
            if field.endswith(".kind"):
                continue
            # A patch's own fields are listed once for all documents.
            name = re.sub(r"^\w+\.patches\[\]\.", "", field)
            assert f"`{name}`" in sections[fate], f"docs/templates.md does not list {field} as {fate}"
