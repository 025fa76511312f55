"""docs/architecture.md's example controller and its unit test are real code: this runs them, as written
there, on the in-memory store."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.controllers.site import Site

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)


async def test_the_example_controller_passes_its_own_test(site: Site) -> None:
    controller, test = _blocks()
    namespace: dict[str, Any] = {"__name__": "architecture_example"}
    exec(compile(controller + test, str(DOC), "exec"), namespace)
    await namespace["test_a_cluster_says_whether_it_is_backed_up"](site)
