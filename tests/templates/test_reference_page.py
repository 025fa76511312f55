"""The templates' reference page (docs/templates.md) names every field of the documents by what herder
does with it."""

from __future__ import annotations

import re
from pathlib import Path

from herder.templates.documents import field_catalogue

DOCS = Path(__file__).resolve().parents[2] / "docs" / "templates.md"


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
