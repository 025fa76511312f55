"""The example provider of ``examples/providers/bash``: under 100 lines of bash, kubectl alone (it runs
against a running herder in ``test_providers``)."""

from __future__ import annotations

import re

from tests.provisioning.provider_site import BASH_PROVIDER


def test_the_example_is_short_and_uses_kubectl_alone() -> None:
    lines = BASH_PROVIDER.read_text().splitlines()
    assert len(lines) < 100
    code = " ".join(line.split("#")[0] for line in lines if not line.lstrip().startswith("#"))
    assert "kubectl" in code
    assert not re.search(r"\b(curl|wget|jq|python3?|herder)\s", code)
