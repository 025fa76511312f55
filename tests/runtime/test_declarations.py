"""The declarations of every controller herder runs: each names its primary kind, no status field has two
writers, and docs/controllers.md (what ``herder debug controllers --markdown`` prints) is up to date."""

from __future__ import annotations

from pathlib import Path

from herder.controllers.catalog import ControllerOptions, controllers, listed_controllers
from herder.resources.catalog import herder_registry
from herder.runtime.describe import markdown
from herder.runtime.outputs import declarations_of
from herder.state.memory import MemoryBackend
from herder.state.store import Store

DOC = Path(__file__).parents[2] / "docs" / "controllers.md"


def test_every_controller_declares_its_kind_and_each_status_field_has_one_writer() -> None:
    running = controllers(Store(MemoryBackend(), herder_registry()), ControllerOptions())
    names = [c.name for c in running]
    assert len(names) == len(set(names))
    for controller in running:
        assert controller.primary, controller.name
        assert controller.outputs, f"{controller.name} declares no outputs"
    declarations_of((c.name, c.outputs) for c in running)


def test_the_controllers_doc_says_what_the_declarations_say() -> None:
    running = listed_controllers(Store(MemoryBackend(), herder_registry()), ControllerOptions())
    assert DOC.read_text() == markdown(running), (
        "docs/controllers.md is stale: run `herder debug controllers --markdown > docs/controllers.md`"
    )
