"""The apiextensions controller of one emulated cluster: a CustomResourceDefinition's kind is served (listed in
discovery, read and written like any kind, server-side apply included) once its names are accepted, and the
definition then says so, as kube-apiserver says it, with the conditions ``NamesAccepted`` and
``Established``. Names another kind of the group has already are not accepted (the definition says why).
A deleted definition stops its kind being served and removes its objects.

What the emulator serves of a definition is its storage version (the others are not converted), with any
``spec`` and ``status``; its OpenAPI schema is not enforced.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from pydantic import BaseModel, ConfigDict

from herder.resources import KindInfo, KindRegistry, Resource, now_rfc3339
from herder.resources.kubernetes import CUSTOM_RESOURCE_DEFINITION, CustomResourceDefinitionSpec
from herder.state.errors import NotFound, StateError
from herder.state.store import Store

log = logging.getLogger(__name__)


class CustomObject(BaseModel):
    """Any spec or status of a custom object (the definition's schema is not enforced)."""

    model_config = ConfigDict(extra="allow")


def custom_kind(spec: CustomResourceDefinitionSpec) -> KindInfo:
    """The kind a definition serves: its storage version."""
    version = next((v for v in spec.versions if v.storage), spec.versions[0])
    names = spec.names
    return KindInfo(
        group=spec.group,
        version=version.name,
        kind=names.kind,
        plural=names.plural,
        namespaced=spec.scope == "Namespaced",
        spec_model=CustomObject,
        status_model=CustomObject,
        short_names=tuple(names.short_names or ()),
        categories=tuple(names.categories or ()),
        description=f"A custom resource of {names.plural}.{spec.group}.",
    )


class CustomResources:
    """Keeps one cluster's registry serving exactly the kinds of its established definitions."""

    def __init__(self, store: Store, registry: KindRegistry) -> None:
        self.store = store
        self.registry = registry
        self._served: dict[str, KindInfo] = {}
        """The kind each definition serves, by the definition's name."""
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _watch(self) -> None:
        while True:
            try:
                async for event in self.store.watch(CUSTOM_RESOURCE_DEFINITION, send_initial_events=True):
                    if event.object is None:
                        continue
                    try:
                        if event.type == "DELETED":
                            await self._removed(event.object)
                        elif event.type in ("ADDED", "MODIFIED"):
                            await self._defined(event.object)
                    except (StateError, NotFound) as exc:
                        log.debug("definition %s: %s", event.object.name, exc)
            except StateError:
                await asyncio.sleep(0.1)

    async def _defined(self, definition: Resource) -> None:
        spec = CUSTOM_RESOURCE_DEFINITION.spec_of(definition, CustomResourceDefinitionSpec)
        wanted = custom_kind(spec)
        served = self._served.get(definition.name)
        problem = ""
        if definition.name != f"{spec.names.plural}.{spec.group}":
            problem = f'metadata.name must be "{spec.names.plural}.{spec.group}"'
        elif served != wanted:
            if served is not None:
                self.registry.unregister(served.group, served.kind)
                del self._served[definition.name]
            taken = self.registry.find_plural(wanted.group, wanted.plural)
            if wanted.kind in self.registry and any(
                k.group == wanted.group and k.kind == wanted.kind for k in self.registry
            ):
                problem = f"{wanted.kind} is already in use in group {wanted.group}"
            elif taken is not None:
                problem = f"{wanted.plural} is already in use in group {wanted.group}"
            if not problem:
                self.registry.register(wanted)
                self._served[definition.name] = wanted
        await self._status(definition, spec, problem)

    async def _status(self, definition: Resource, spec: CustomResourceDefinitionSpec, problem: str) -> None:
        status: dict[str, Any] = dict(definition.status or {})
        now = now_rfc3339()
        before = {c.get("type"): c for c in status.get("conditions") or ()}

        def condition(kind: str, ok: bool, reason: str, message: str) -> dict[str, Any]:
            value = "True" if ok else "False"
            old = before.get(kind) or {}
            since = old.get("lastTransitionTime") if old.get("status") == value else now
            return {
                "type": kind,
                "status": value,
                "reason": reason,
                "message": message,
                "lastTransitionTime": since,
            }

        conditions = [
            condition(
                "NamesAccepted",
                not problem,
                "ConflictingNames" if problem else "NoConflicts",
                problem or "no conflicts found",
            ),
            condition(
                "Established",
                not problem,
                "NotAccepted" if problem else "InitialNamesAccepted",
                "not all names are accepted" if problem else "the initial names have been accepted",
            ),
        ]
        names = spec.names.model_dump(mode="json", by_alias=True, exclude_none=True)
        names.setdefault("singular", spec.names.kind.lower())
        names.setdefault("listKind", f"{spec.names.kind}List")
        wanted = {
            **status,
            "conditions": conditions,
            "acceptedNames": names if not problem else {"plural": "", "kind": ""},
            "storedVersions": [v.name for v in spec.versions if v.storage],
        }
        if wanted != status:
            current = await self.store.get(CUSTOM_RESOURCE_DEFINITION, definition.name)
            if current.metadata.uid == definition.metadata.uid:
                await self.store.update_status(current.model_copy(update={"status": wanted}))

    async def _removed(self, definition: Resource) -> None:
        served = self._served.pop(definition.name, None)
        if served is None:
            return
        objects = await self.store.list(served)
        for obj in objects.items:
            with contextlib.suppress(NotFound):
                await self.store.delete(served, obj.name, obj.namespace)
        self.registry.unregister(served.group, served.kind)
