"""One sync of a ClusterManifest into its workload cluster, and its dry run.

Objects are server-side applied as ``herder`` (forced), in dependency order: Namespaces and
CustomResourceDefinitions first, then — once each definition is established — everything else. A
namespaced object that names no namespace goes to the manifest's (else ``default``). ``one-time`` objects
are applied when they are not in the inventory yet, and never again. In ``full`` mode the objects of the
inventory that the manifest no longer has are deleted (pruned) — only after a sync in which every object
applied, so that an object never goes because its kind could not be looked up for a moment.

The dry run (``plan``) asks the API server what applying each object would make of it (``dryRun=All``)
and shows it beside the live object, with the prunes it would make.
"""

from __future__ import annotations

import asyncio
import difflib
import time
from dataclasses import dataclass, field
from typing import Any

import yaml

from herder.controllers.kubernetes.workload import WorkloadAPI, WorkloadError
from herder.resources.manifests import (
    ClusterManifestSpec,
    InventoryEntry,
    ObjectRef,
    ObjectResult,
    describe,
    object_key,
)

CRD = ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
ESTABLISH_TIMEOUT = 15.0
_FIRST = ("Namespace", "CustomResourceDefinition")
# What the API server sets on every write: not what a diff is about.
_NOISE = ("resourceVersion", "generation", "managedFields", "uid", "creationTimestamp")


def first(obj: dict[str, Any]) -> bool:
    """Whether others may need the object to exist first (a namespace, a definition)."""
    return obj.get("kind") in _FIRST


def _established(definition: dict[str, Any] | None) -> bool:
    conditions = (definition or {}).get("status", {}).get("conditions") or ()
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


@dataclass
class Outcome:
    """What a sync did: each object's result, the inventory after it, and the objects it changed in the
    cluster (new, or reverted to the manifest: drift)."""

    results: list[ObjectResult] = field(default_factory=list)
    inventory: list[InventoryEntry] = field(default_factory=list)
    changed: list[ObjectRef] = field(default_factory=list)
    versions: dict[ObjectRef, str] = field(default_factory=dict)

    @property
    def failed(self) -> list[ObjectResult]:
        return [r for r in self.results if r.state == "Failed"]


def _result(ref: ObjectRef, state: str, message: str = "") -> ObjectResult:
    api_version, kind, namespace, name = ref
    return ObjectResult.model_validate(
        {
            "apiVersion": api_version,
            "kind": kind,
            "namespace": namespace,
            "name": name,
            "state": state,
            "message": message,
        }
    )


def _entry(ref: ObjectRef, uid: str) -> InventoryEntry:
    api_version, kind, namespace, name = ref
    return InventoryEntry.model_validate(
        {"apiVersion": api_version, "kind": kind, "namespace": namespace, "name": name, "uid": uid}
    )


async def placed(api: WorkloadAPI, spec: ClusterManifestSpec, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with the namespace it goes to (a namespaced kind's, when it names none); unchanged when its
    kind is not served (yet)."""
    metadata = obj.get("metadata") or {}
    if metadata.get("namespace"):
        return obj
    found = await api.resource(str(obj.get("apiVersion")), str(obj.get("kind")))
    if found is None or not found.namespaced:
        return obj
    return {**obj, "metadata": {**metadata, "namespace": spec.namespace or "default"}}


async def wait_established(api: WorkloadAPI, name: str, timeout: float = ESTABLISH_TIMEOUT) -> str:
    """'' once the definition ``name`` is established, else why it is not (after ``timeout``)."""
    deadline = time.monotonic() + timeout
    definition: dict[str, Any] | None = None
    while True:
        definition = await api.get((*CRD, "", name))
        if _established(definition):
            return ""
        if time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.2)
    conditions = (definition or {}).get("status", {}).get("conditions") or ()
    why = "; ".join(f"{c.get('type')}: {c.get('message')}" for c in conditions if c.get("status") != "True")
    return f"CustomResourceDefinition {name} is not established" + (f": {why}" if why else "")


async def sync(
    api: WorkloadAPI,
    spec: ClusterManifestSpec,
    inventory: list[InventoryEntry],
    versions: dict[ObjectRef, str] | None = None,
    *,
    establish_timeout: float = ESTABLISH_TIMEOUT,
) -> Outcome:
    """Apply the manifest; prune what it dropped (full mode). ``versions``: the resourceVersion each object
    had after the previous sync (an apply that moves it changed the object)."""
    versions = versions or {}
    known = {e.ref: e for e in inventory}
    out = Outcome()
    kept: dict[ObjectRef, InventoryEntry] = {}
    ordered = sorted(spec.manifests, key=lambda o: not first(o))
    waiting: str = ""
    for obj in ordered:
        if waiting and not first(obj):
            # The definitions come first; what follows may need one that is not established.
            definition_needed = await api.resource(str(obj.get("apiVersion")), str(obj.get("kind"))) is None
            if definition_needed:
                out.results.append(_result(object_key(obj, spec.namespace), "Failed", waiting))
                continue
        try:
            obj = await placed(api, spec, obj)
        except WorkloadError as exc:
            out.results.append(_result(object_key(obj, spec.namespace), "Failed", str(exc)))
            continue
        ref = object_key(obj)
        if spec.mode == "one-time" and ref in known:
            kept[ref] = known[ref]
            out.results.append(
                _result(ref, "Applied", "applied once; one-time objects are not touched again")
            )
            continue
        try:
            applied = await api.apply(obj)
        except WorkloadError as exc:
            out.results.append(_result(ref, "Failed", str(exc)))
            continue
        metadata = applied.get("metadata") or {}
        version = str(metadata.get("resourceVersion", ""))
        if versions.get(ref) != version:
            out.changed.append(ref)
        out.versions[ref] = version
        kept[ref] = _entry(ref, str(metadata.get("uid", "")))
        message = ""
        if (obj.get("apiVersion"), obj.get("kind")) == CRD:
            message = await wait_established(api, ref[3], establish_timeout)
            if message:
                waiting = message
                out.results.append(_result(ref, "Failed", message))
                continue
        out.results.append(_result(ref, "Applied", message))
    for failed in out.failed:
        # An object that could not be looked up or applied this time is still the manifest's.
        if failed.ref in known:
            kept.setdefault(failed.ref, known[failed.ref])
    wanted = set(kept) | {r.ref for r in out.results}
    gone = [e for e in inventory if e.ref not in wanted]
    if spec.mode == "full" and not out.failed:
        # What needs the namespaces and definitions goes first.
        for entry in sorted(gone, key=lambda e: e.kind in _FIRST):
            try:
                await api.delete(entry.ref)
                out.results.append(_result(entry.ref, "Pruned", "removed from the manifest"))
            except WorkloadError as exc:
                out.results.append(_result(entry.ref, "Failed", f"could not prune: {exc}"))
                kept[entry.ref] = entry
    else:
        for entry in gone:
            kept[entry.ref] = entry
    out.inventory = list(kept.values())
    return out


async def prune_all(api: WorkloadAPI, inventory: list[InventoryEntry]) -> list[ObjectResult]:
    """Delete every object of the inventory (a full-mode manifest that is deleted)."""
    results = []
    for entry in sorted(inventory, key=lambda e: e.kind in _FIRST):
        try:
            await api.delete(entry.ref)
            results.append(_result(entry.ref, "Pruned", "the manifest was deleted"))
        except WorkloadError as exc:
            results.append(_result(entry.ref, "Failed", f"could not prune: {exc}"))
    return results


# --- the dry run ---


def _shown(obj: dict[str, Any] | None) -> list[str]:
    if obj is None:
        return []
    shown = {k: v for k, v in obj.items() if k != "status"}
    metadata = {k: v for k, v in (shown.get("metadata") or {}).items() if k not in _NOISE}
    annotations = {
        k: v
        for k, v in (metadata.get("annotations") or {}).items()
        if k != "kubectl.kubernetes.io/last-applied-configuration"
    }
    if annotations:
        metadata["annotations"] = annotations
    else:
        metadata.pop("annotations", None)
    shown["metadata"] = metadata
    return yaml.safe_dump(shown, sort_keys=True).splitlines(keepends=True)


@dataclass(frozen=True)
class PlannedChange:
    ref: ObjectRef
    action: str
    """``create``, ``update``, ``prune``, ``unchanged`` or ``error``."""
    diff: str = ""
    message: str = ""

    def __str__(self) -> str:
        head = f"{self.action} {describe(self.ref)}" + (f": {self.message}" if self.message else "")
        return head + ("\n" + self.diff if self.diff else "")


async def plan(
    api: WorkloadAPI, spec: ClusterManifestSpec, inventory: list[InventoryEntry]
) -> list[PlannedChange]:
    """What a sync would change, object by object, as the API server's dry run says."""
    known = {e.ref for e in inventory}
    out: list[PlannedChange] = []
    wanted: set[ObjectRef] = set()
    for obj in sorted(spec.manifests, key=lambda o: not first(o)):
        try:
            obj = await placed(api, spec, obj)
            ref = object_key(obj)
            wanted.add(ref)
            if spec.mode == "one-time" and ref in known:
                out.append(PlannedChange(ref, "unchanged", message="one-time: applied once already"))
                continue
            live = await api.get(ref)
            after = await api.apply(obj, dry_run=True)
        except WorkloadError as exc:
            ref = object_key(obj, spec.namespace)
            wanted.add(ref)
            out.append(PlannedChange(ref, "error", message=str(exc)))
            continue
        where = describe(ref)
        diff = "".join(
            difflib.unified_diff(
                _shown(live),
                _shown(after),
                fromfile=f"live/{where}" if live else "/dev/null",
                tofile=f"manifest/{where}",
            )
        )
        action = "create" if live is None else "update" if diff else "unchanged"
        out.append(PlannedChange(ref, action, diff))
    if spec.mode == "full":
        for entry in inventory:
            if entry.ref not in wanted:
                out.append(PlannedChange(entry.ref, "prune", message="removed from the manifest"))
    return out
