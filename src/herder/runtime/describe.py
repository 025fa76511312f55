"""What controllers declare, written out: who reads what and who writes what.

``herder debug controllers`` prints it for the controllers a server runs, and ``docs/controllers.md`` is
its Markdown (a test keeps the two the same), so that "who writes ``Cluster.status.X``?" is answered by
reading, not by searching the code.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from herder.runtime.controller import Controller
from herder.runtime.outputs import ANY_KIND, Output


def inputs(controller: Controller) -> list[str]:
    """The kinds a controller watches, in order, once each."""
    return list(dict.fromkeys(w.kind for w in controller.watches))


def output_lines(output: Output) -> list[str]:
    """One output as short phrases: what of the kind the controller makes, changes and deletes."""
    kind = "any kind" if output.kind == ANY_KIND else output.kind
    what: list[str] = []
    if output.owned:
        shared = ", shared" if output.shared else ""
        releasable = ", releasable" if output.releasable else ""
        what.append(f"owns {kind}{shared}{releasable}")
    if output.creates:
        what.append(f"creates {kind}")
    if output.deletes:
        what.append(f"deletes {kind}")
    what.extend(f"{kind}.{path}" for path in output.fields)
    return what


def writers(running: Sequence[Controller]) -> dict[str, list[tuple[str, str]]]:
    """By kind, every declared field and the controller that writes it, sorted."""
    by_kind: defaultdict[str, list[tuple[str, str]]] = defaultdict(list)
    for controller in running:
        for output in controller.outputs:
            for path in output.fields:
                by_kind[output.kind].append((path, controller.name))
    return {kind: sorted(fields) for kind, fields in sorted(by_kind.items())}


def markdown(running: Sequence[Controller]) -> str:
    lines = [
        "# Controllers",
        "",
        "Generated from the controllers' declarations by `herder debug controllers --markdown`; a test",
        "keeps it current. Each controller reconciles objects of its primary kind, is woken by changes of",
        "its inputs, and writes only its outputs (`runtime.outputs`): objects it owns (made through",
        "`Context.apply_output`; *shared* ones stay open to users, *releasable* ones may be released by",
        "others through `Context.release`), objects it creates or deletes, and the fields it sets.",
        "",
        "| controller | primary | inputs | outputs |",
        "|---|---|---|---|",
    ]
    for controller in running:
        outs = "<br>".join(f"`{line}`" for output in controller.outputs for line in output_lines(output))
        lines.append(
            f"| {controller.name} | {controller.primary} | {', '.join(inputs(controller))} | {outs} |"
        )
    lines += ["", "## Who writes which field", ""]
    for kind, fields in writers(running).items():
        lines.append(f"- **{'any kind' if kind == ANY_KIND else kind}**")
        lines.extend(f"  - `{path}`: {name}" for path, name in fields)
    return "\n".join(lines) + "\n"
