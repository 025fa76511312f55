"""Cluster templates: a cluster as Omni's multi-document YAML (``Cluster``, ``ControlPlane``, ``Workers``,
``Machine``), read strictly, checked offline, and translated into herder's objects; and the way back,
a template from a live cluster. What sync changes is planned here too, from the live objects it is given.

This layer imports only ``resources`` and ``talos``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from herder.resources import Resource
from herder.templates.problems import InvalidTemplate, Problem, Problems
from herder.templates.render import DEFAULT_NAMESPACE
from herder.templates.template import Template, read_template
from herder.templates.validation import validate


@dataclass(frozen=True)
class CheckedTemplate:
    """A template file read and checked: its problems, and the objects it makes (when it has no errors)."""

    template: Template
    problems: Problems
    resources: list[Resource]

    @property
    def cluster_name(self) -> str:
        cluster = self.template.cluster
        return cluster.name if cluster is not None else ""

    def objects(self) -> list[Resource]:
        """The objects the template makes; raises ``InvalidTemplate`` with every error if it has any."""
        if self.problems.errors:
            raise InvalidTemplate(self.problems.errors)
        return self.resources


def check_file(path: Path, namespace: str = DEFAULT_NAMESPACE) -> CheckedTemplate:
    """Read and check the template in ``path``, offline."""
    template, problems = read_template(path)
    resources = validate(template, problems, namespace) if template.readable else []
    problems.sort()
    return CheckedTemplate(template, problems, resources)


__all__ = ["CheckedTemplate", "InvalidTemplate", "Problem", "Problems", "check_file"]
