"""Field selectors on the fields a kind allows besides its metadata (a pod's spec.nodeName), as kubectl's
drain and describe use them."""

from __future__ import annotations

import pytest

from herder.resources import Resource
from herder.state.errors import Invalid
from herder.state.selectors import FieldSelector

POD = Resource.from_dict(
    {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "apps"},
        "spec": {"nodeName": "worker-1", "hostNetwork": True},
        "status": {"phase": "Running"},
    }
)
ALLOWED = ("spec.nodeName", "spec.hostNetwork", "status.phase", "status.podIP")


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ("spec.nodeName=worker-1", True),
        ("spec.nodeName=worker-1,status.phase!=Succeeded,status.phase!=Failed", True),
        ("spec.nodeName==worker-2", False),
        ("spec.hostNetwork=true", True),
        ("status.podIP=", True),
        ("metadata.namespace=apps,metadata.name!=web", False),
    ],
)
def test_allowed_fields_match_as_text(text: str, matches: bool) -> None:
    assert FieldSelector.parse(text, ALLOWED).matches(POD) is matches


def test_a_field_the_kind_does_not_allow_is_refused() -> None:
    with pytest.raises(Invalid, match=r'field label not supported: "spec.nodeName"'):
        FieldSelector.parse("spec.nodeName=worker-1")
