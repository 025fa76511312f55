"""Server-side apply's logic without HTTP: field sets in FieldsV1 notation, structured merging by the
kind's schema, and the managed fields each kind of write records (``krm.fieldmanager``)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from herder.krm import structured
from herder.krm.fieldmanager import ApplyConflict, FieldManager
from herder.krm.fieldpath import FieldSet, format_path
from herder.resources import LIST_SET, Condition, InvalidObject, KindInfo, Resource, list_map


class Item(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    value: str = ""


class WidgetSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    size: int = 1
    color: str | None = None
    items: list[Item] = Field(default_factory=list, json_schema_extra=list_map("name"))
    tags: list[str] = Field(default_factory=list, json_schema_extra=LIST_SET)
    args: list[str] = Field(default_factory=list)
    settings: dict[str, Any] = Field(default_factory=dict)


class WidgetStatus(BaseModel):
    model_config = ConfigDict(extra="forbid")
    phase: str | None = None
    conditions: list[Condition] = Field(default_factory=list, json_schema_extra=list_map("type"))


WIDGET = KindInfo(
    "test.herder.dev", "v1", "Widget", "widgets", spec_model=WidgetSpec, status_model=WidgetStatus
)
API = "test.herder.dev/v1"


def config(spec: dict[str, Any] | None = None, **metadata: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": API, "kind": "Widget", "metadata": {"name": "w", **metadata}}
    if spec is not None:
        out["spec"] = spec
    return out


def stored(data: dict[str, Any]) -> Resource:
    """``data`` as the store keeps it: validated, with the identity the store gives."""
    obj = WIDGET.validate(
        Resource.from_dict({**data, "metadata": {"namespace": "default", **data["metadata"]}})
    )
    obj.metadata.uid, obj.metadata.resource_version = "u1", "7"
    return obj


def owners(obj: Resource) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (e.manager or "", e.operation or ""): e.fields_v1 or {} for e in obj.metadata.managed_fields or ()
    }


def apply(fm: FieldManager, live: Resource | None, cfg: dict[str, Any], manager: str, **kw: Any) -> Resource:
    return stored(
        fm.applied(WIDGET, live, cfg, manager, kw.pop("subresource", None), force=kw.pop("force", False))
    )


# field sets


def test_field_sets_read_and_write_the_fieldsv1_notation() -> None:
    data = {
        "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
        "f:spec": {'k:{"name": "a"}': {".": {}, "f:value": {}}},
    }
    fields = FieldSet.from_json(data)
    # Keys are written canonically (compact JSON), and "." marks a node that is in the set itself.
    assert fields.to_json() == {
        "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
        "f:spec": {'k:{"name":"a"}': {".": {}, "f:value": {}}},
    }
    assert ("f:metadata", "f:labels") in fields and ("f:metadata",) not in fields
    assert list(fields.leaves()) == [
        ("f:metadata", "f:labels", "f:app"),
        ("f:spec", 'k:{"name":"a"}', "f:value"),
    ]
    assert format_path(("f:spec", 'k:{"name":"a","port":80}', "f:value")) == '.spec[name="a",port=80].value'
    assert format_path(("f:spec", "f:tags", 'v:"x"')) == '.spec.tags[="x"]'
    for bad in ({"spec": {}}, {"k:[1]": {}}, {"f:a": 1}, {".": {"x": {}}}, {"i:x": {}}):
        with pytest.raises(ValueError):
            FieldSet.from_json(bad)


def test_set_algebra() -> None:
    a = FieldSet.of(("f:spec", "f:a"), ("f:spec", "f:b"))
    b = FieldSet.of(("f:spec", "f:b"), ("f:spec", "f:c"))
    assert list(a.union(b).members()) == [("f:spec", "f:a"), ("f:spec", "f:b"), ("f:spec", "f:c")]
    assert list(a.difference(b).members()) == [("f:spec", "f:a")]
    assert list(a.intersection(b).members()) == [("f:spec", "f:b")]
    assert a.difference(a).empty()


def test_a_field_set_owns_map_keys_and_items_but_declared_fields_only_through_their_contents() -> None:
    shape = FieldManager().shape(WIDGET)
    value = {
        "spec": {
            "size": 2,
            "items": [{"name": "a", "value": "1"}],
            "tags": ["x"],
            "args": ["--v"],
            "settings": {"deep": {"er": 1}},
        },
        "metadata": {"labels": {"app": "w"}},
    }
    assert structured.field_set(value, shape).to_json() == {
        "f:metadata": {"f:labels": {"f:app": {}}},
        "f:spec": {
            "f:args": {},
            "f:items": {'k:{"name":"a"}': {".": {}, "f:name": {}, "f:value": {}}},
            "f:settings": {"f:deep": {".": {}, "f:er": {}}},
            "f:size": {},
            "f:tags": {'v:"x"': {}},
        },
    }


def test_compare_finds_what_was_added_modified_and_removed() -> None:
    shape = FieldManager().shape(WIDGET)
    before = {"spec": {"size": 1, "args": ["a"], "items": [{"name": "a", "value": "1"}, {"name": "b"}]}}
    after = {"spec": {"size": 2, "args": ["a"], "items": [{"name": "a", "value": "2"}], "color": "red"}}
    result = structured.compare(before, after, shape)
    assert list(result.added.members()) == [("f:spec", "f:color")]
    assert list(result.modified.members()) == [
        ("f:spec", "f:items", 'k:{"name":"a"}', "f:value"),
        ("f:spec", "f:size"),
    ]
    assert list(result.removed.members()) == [
        ("f:spec", "f:items", 'k:{"name":"b"}'),
        ("f:spec", "f:items", 'k:{"name":"b"}', "f:name"),
    ]


def test_merge_keeps_keyed_items_it_is_not_given_and_replaces_atomic_lists() -> None:
    shape = FieldManager().shape(WIDGET)
    live = {
        "spec": {"items": [{"name": "a", "value": "1"}, {"name": "b"}], "args": ["x", "y"], "tags": ["t"]}
    }
    cfg = {
        "spec": {
            "items": [{"name": "c"}, {"name": "a", "value": "2"}],
            "args": ["z"],
            "tags": ["u"],
            "color": None,
        }
    }
    assert structured.merge(live, cfg, shape) == {
        "spec": {
            "items": [{"name": "c"}, {"name": "a", "value": "2"}, {"name": "b"}],
            "args": ["z"],
            "tags": ["t", "u"],
        }
    }


# managed fields of writes


def test_apply_creates_with_one_apply_entry() -> None:
    fm = FieldManager()
    obj = apply(fm, None, config({"size": 3}, labels={"app": "w"}), "alice")
    (entry,) = obj.metadata.managed_fields or []
    assert (entry.manager, entry.operation, entry.api_version, entry.fields_type) == (
        "alice",
        "Apply",
        API,
        "FieldsV1",
    )
    assert entry.time and entry.subresource is None
    assert entry.fields_v1 == {"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:size": {}}}
    assert obj.spec == {"size": 3, "items": [], "tags": [], "args": [], "settings": {}}


def test_the_same_value_is_shared_and_a_different_one_conflicts_until_forced() -> None:
    fm = FieldManager()
    live = apply(fm, None, config({"size": 3, "color": "red"}), "alice")
    shared = apply(fm, live, config({"size": 3}), "bob")
    assert owners(shared)[("bob", "Apply")] == {"f:spec": {"f:size": {}}}
    assert owners(shared)[("alice", "Apply")] == {"f:spec": {"f:color": {}, "f:size": {}}}
    with pytest.raises(ApplyConflict) as refused:
        apply(fm, shared, config({"size": 4, "color": "blue"}), "bob")
    assert refused.value.code == 409 and refused.value.reason == "Conflict"
    assert refused.value.message == (
        'Apply failed with 2 conflicts: conflicts with "alice":\n- .spec.color\n- .spec.size'
    )
    assert refused.value.details == {
        "causes": [
            {"reason": "FieldManagerConflict", "message": 'conflict with "alice"', "field": ".spec.color"},
            {"reason": "FieldManagerConflict", "message": 'conflict with "alice"', "field": ".spec.size"},
        ]
    }
    forced = apply(fm, shared, config({"size": 4, "color": "blue"}), "bob", force=True)
    assert forced.spec is not None and (forced.spec["size"], forced.spec["color"]) == (4, "blue")
    assert ("alice", "Apply") not in owners(forced)  # it owned nothing else
    assert owners(forced)[("bob", "Apply")] == {"f:spec": {"f:color": {}, "f:size": {}}}


def test_an_update_takes_what_it_changes_and_conflicts_name_it_with_its_version_and_time() -> None:
    fm = FieldManager()
    live = apply(fm, None, config({"size": 3, "color": "red"}), "alice")
    edited = live.clone()
    assert edited.spec is not None
    edited.spec["color"] = "green"
    edited.metadata.managed_fields = fm.updated(WIDGET, live, edited, "kubectl-edit", None)
    assert owners(edited)[("kubectl-edit", "Update")] == {"f:spec": {"f:color": {}}}
    assert owners(edited)[("alice", "Apply")] == {"f:spec": {"f:size": {}}}
    when = next(e.time for e in edited.metadata.managed_fields or () if e.manager == "kubectl-edit")
    with pytest.raises(ApplyConflict) as refused:
        apply(fm, edited, config({"size": 3, "color": "red"}), "alice")
    assert refused.value.message == (
        f'Apply failed with 1 conflict: conflict with "kubectl-edit" using {API} at {when}: .spec.color'
    )


def test_fields_an_applier_drops_go_unless_someone_else_owns_them() -> None:
    fm = FieldManager()
    live = apply(fm, None, config({"color": "red", "size": 3}, labels={"a": "1", "b": "2"}), "alice")
    live = apply(fm, live, config({"size": 3}, labels={"b": "2"}), "bob")
    after = apply(fm, live, config(), "alice")
    assert after.metadata.labels == {"b": "2"}
    assert after.spec is not None and after.spec["size"] == 3 and "color" not in after.spec
    assert ("alice", "Apply") not in owners(after)
    # A field nobody manages (written by herder itself, untracked) stays when an applier lets go of
    # its neighbours.
    untracked = live.clone()
    untracked.metadata.labels["herder"] = "x"
    assert apply(fm, untracked, config({"size": 3}), "alice").metadata.labels == {"b": "2", "herder": "x"}


def test_keyed_lists_are_owned_item_by_item() -> None:
    fm = FieldManager()
    live = apply(fm, None, config({"items": [{"name": "a", "value": "1"}]}), "alice")
    live = apply(fm, live, config({"items": [{"name": "b", "value": "2"}]}), "bob")
    assert live.spec is not None and [i["name"] for i in live.spec["items"]] == ["a", "b"]
    with pytest.raises(ApplyConflict) as refused:
        apply(fm, live, config({"items": [{"name": "a", "value": "9"}]}), "bob")
    assert refused.value.message.endswith(': .spec.items[name="a"].value')
    dropped = apply(fm, live, config({"items": []}), "alice")
    assert dropped.spec is not None and dropped.spec["items"] == [{"name": "b", "value": "2"}]
    with pytest.raises(InvalidObject) as unkeyed:
        apply(fm, live, config({"items": [{"value": "x"}]}), "alice")
    assert unkeyed.value.causes[0].field == "spec.items"
    assert 'omits key field "name"' in unkeyed.value.causes[0].message


def test_owner_references_merge_by_uid_and_finalizers_as_a_set() -> None:
    fm = FieldManager()
    ref = {"apiVersion": "v1", "kind": "Namespace", "name": "n", "uid": "1"}
    live = apply(fm, None, config(ownerReferences=[ref], finalizers=["a"]), "alice")
    live = apply(fm, live, config(ownerReferences=[{**ref, "uid": "2"}], finalizers=["b"]), "bob")
    assert [r.uid for r in live.metadata.owner_references] == ["1", "2"]
    assert live.metadata.finalizers == ["a", "b"]
    assert owners(live)[("bob", "Apply")]["f:metadata"]["f:finalizers"] == {'v:"b"': {}}


def test_status_has_its_own_managers() -> None:
    fm = FieldManager()
    live = apply(fm, None, {**config({"size": 1}), "status": {"phase": "Ignored"}}, "alice")
    assert live.status is None  # the main resource does not write status
    cond = {"type": "Ready", "status": "True"}
    reported = apply(
        fm, live, {**config(), "status": {"phase": "Up", "conditions": [cond]}}, "ctl", subresource="status"
    )
    assert reported.spec == live.spec and reported.status is not None and reported.status["phase"] == "Up"
    entry = next(e for e in reported.metadata.managed_fields or () if e.manager == "ctl")
    assert entry.subresource == "status"
    assert entry.fields_v1 == {
        "f:status": {
            "f:conditions": {'k:{"type":"Ready"}': {".": {}, "f:status": {}, "f:type": {}}},
            "f:phase": {},
        }
    }
    with pytest.raises(ApplyConflict) as refused:
        apply(fm, reported, {**config(), "status": {"phase": "Down"}}, "other", subresource="status")
    assert 'conflict with "ctl" with subresource "status": .status.phase' in refused.value.message


def test_the_first_apply_to_an_untracked_object_gives_what_it_had_to_before_first_apply() -> None:
    fm = FieldManager()
    live = stored(config({"size": 5, "color": "red"}))  # written by herder itself: no managed fields
    grown = live.clone()
    assert grown.spec is not None
    grown.spec["size"] = 6
    assert fm.updated(WIDGET, live, grown, "herder", None) is None  # still untracked
    with pytest.raises(ApplyConflict) as refused:
        apply(fm, live, config({"size": 9}), "alice")
    assert refused.value.message.startswith(
        'Apply failed with 1 conflict: conflict with "before-first-apply"'
    )
    assert refused.value.message.endswith(": .spec.size")


def test_writers_may_edit_and_reset_managed_fields() -> None:
    fm = FieldManager()
    live = apply(fm, None, config({"size": 3}), "alice")
    cleared = live.clone()
    cleared.metadata.managed_fields = [type(e)() for e in (live.metadata.managed_fields or [])]
    assert fm.updated(WIDGET, live, cleared, "kubectl-edit", None) is None
    renamed = live.clone()
    renamed.metadata.managed_fields[0].manager = "carol"  # type: ignore[index]
    entries = fm.updated(WIDGET, live, renamed, "kubectl-edit", None) or []
    assert [(e.manager, e.operation) for e in entries] == [("carol", "Apply")]


def test_more_than_ten_updaters_fold_the_oldest_into_ancient_changes() -> None:
    fm = FieldManager()
    live = apply(fm, None, config({"settings": {}}), "alice")
    for i in range(12):
        new = live.clone()
        assert new.spec is not None
        new.spec["settings"][f"k{i}"] = i
        new.metadata.managed_fields = fm.updated(WIDGET, live, new, f"writer-{i:02}", None)
        live = new
    names = [e.manager for e in live.metadata.managed_fields or () if e.operation == "Update"]
    assert len(names) == 10 and "ancient-changes" in names and "writer-00" not in names
    assert "writer-11" in names


def test_a_kubectl_apply_keeps_the_client_side_annotation_in_step() -> None:
    fm = FieldManager()
    annotation = "kubectl.kubernetes.io/last-applied-configuration"
    live = apply(fm, None, config({"size": 1}, annotations={annotation: "{}"}), "kubectl-client-side-apply")
    cfg = config({"size": 2})
    after = apply(fm, live, cfg, "kubectl", force=True)
    assert after.metadata.annotations[annotation] == (
        '{"apiVersion":"test.herder.dev/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"size":2}}'
    )


def test_an_apply_that_changes_nothing_changes_no_time() -> None:
    fm = FieldManager()
    live = apply(fm, None, config({"size": 3}), "alice")
    again = apply(fm, live, config({"size": 3}), "alice")
    assert again == live
