"""Table rows: made once per object revision, with ages rendered at each answer."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from herder.krm.table import Row, table
from herder.resources.catalog import herder_registry

CREATED = "2025-01-01T00:00:00Z"
T0 = datetime(2025, 1, 1, tzinfo=UTC).timestamp()


def test_a_row_renders_its_age_as_of_each_answer() -> None:
    info = herder_registry().get("ConfigPatch")
    obj = {"metadata": {"name": "p", "creationTimestamp": CREATED}, "spec": {"description": "d"}}
    row = Row(info, obj, "Metadata")
    first, later = json.loads(row.render(T0 + 42)), json.loads(row.render(T0 + 3 * 86400 + 4 * 3600))
    assert first["cells"] == ["p", None, "d", "42s"]
    assert later["cells"] == ["p", None, "d", "3d4h"]
    assert first["object"] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    }
    bad = json.loads(Row(info, {"metadata": {"name": "q", "creationTimestamp": "soon"}}, "None").render(T0))
    assert bad == {"cells": ["q", None, None, "<invalid>"]}


def test_a_table_of_rows() -> None:
    info = herder_registry().get("ConfigPatch")
    rows = [Row(info, {"metadata": {"name": n}, "spec": {}}, "Object") for n in ("a", "b")]
    data = json.loads(table(info, rows, resource_version="7", continue_token="next"))
    assert data["metadata"] == {"resourceVersion": "7", "continue": "next"}
    assert [c["name"] for c in data["columnDefinitions"]] == ["Name", "Cluster", "Description", "Age"]
    assert [r["object"]["metadata"]["name"] for r in data["rows"]] == ["a", "b"]
    assert json.loads(table(info, [], headers=False))["columnDefinitions"] == []
