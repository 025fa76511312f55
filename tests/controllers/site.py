"""A site for controller unit tests: herder's kinds on the in-memory store with their admission checks, a
reconcile run as the manager runs it (with every controller's declarations, so an undeclared write
raises), a fake clock, and fake machines behind the ``MachineDialer``.

No subprocess, no network: a reconcile-level test builds the objects a decision reads, runs one
reconcile, and asserts what it wrote, which Events it told and which machine calls it made.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from herder.controllers.catalog import ControllerOptions, controllers, register_admission
from herder.resources import Resource
from herder.resources.catalog import herder_registry
from herder.runtime.clock import FakeClock
from herder.runtime.controller import Context, Controller, ObjectKey, Result
from herder.runtime.event_recorder import EventRecorder
from herder.runtime.manager import Manager
from herder.runtime.outputs import Declaration, declarations_of
from herder.state.encryption import Cipher
from herder.state.memory import MemoryBackend
from herder.state.store import Store, WatchEvent
from herder.talos.contracts import VersionContract
from herder.talos.machine import MachineAPIError
from herder.talos.secrets import dump_secrets, generate_secrets

API = "herder.dev/v1alpha1"
NAMESPACE = "default"


def obj(kind: str, name: str, *, namespaced: bool = True, **body: Any) -> Resource:
    """An object of herder's API: ``metadata`` (labels, annotations…) and body fields as keywords."""
    metadata = {"name": name, **({"namespace": NAMESPACE} if namespaced else {}), **body.pop("metadata", {})}
    api_version = body.pop("api_version", API)
    return Resource.model_validate({"apiVersion": api_version, "kind": kind, "metadata": metadata, **body})


@functools.cache
def secrets_bundle(contract: str) -> str:
    """One generated secrets bundle per Talos contract for the whole test session (RSA keys are slow)."""
    return dump_secrets(generate_secrets(VersionContract.parse(contract)))


@dataclass
class Call:
    endpoint: str
    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    secure: bool


@dataclass(frozen=True)
class Stream:
    """The answer of a streaming method (``watch_resources``, ``logs``): what ``events`` of the call yields."""

    events: Callable[[Call], AsyncIterator[Any]]


@dataclass
class FakeMachines:
    """A ``MachineDialer`` of fake machines: every call is recorded; ``answers`` give what a method returns
    (a value, or a callable of the call), ``failures`` what it raises, by (endpoint or "*", method)."""

    calls: list[Call] = field(default_factory=list)
    answers: dict[tuple[str, str], Any] = field(default_factory=dict)
    failures: dict[tuple[str, str], MachineAPIError] = field(default_factory=dict)

    def __call__(self, endpoint: str, *, credentials: Any, **options: Any) -> FakeClient:
        return FakeClient(self, endpoint, credentials is not None)

    def answer(self, method: str, value: Any, endpoint: str = "*") -> None:
        self.answers[(endpoint, method)] = value

    def fail(self, method: str, error: MachineAPIError, endpoint: str = "*") -> None:
        self.failures[(endpoint, method)] = error

    def made(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]


class FakeClient:
    """What a controller holds of one fake machine: any method of ``MachineClient``, recorded."""

    def __init__(self, machines: FakeMachines, endpoint: str, secure: bool) -> None:
        self._machines = machines
        self._endpoint = endpoint
        self._secure = secure

    async def __aenter__(self) -> FakeClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        return None

    async def close(self) -> None:
        return None

    def __getattr__(self, method: str) -> Callable[..., Any]:
        machines, endpoint = self._machines, self._endpoint
        streamed = next(
            (
                answer
                for where in (endpoint, "*")
                if isinstance(answer := machines.answers.get((where, method)), Stream)
            ),
            None,
        )
        if streamed is not None:

            def stream(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
                made = Call(endpoint, method, args, kwargs, self._secure)
                machines.calls.append(made)
                return streamed.events(made)

            return stream

        async def call(*args: Any, **kwargs: Any) -> Any:
            made = Call(endpoint, method, args, kwargs, self._secure)
            machines.calls.append(made)
            for where in (endpoint, "*"):
                if (where, method) in machines.failures:
                    raise machines.failures[(where, method)]
            for where in (endpoint, "*"):
                if (where, method) in machines.answers:
                    answer = machines.answers[(where, method)]
                    return answer(made) if callable(answer) else answer
            return None

        return call


class Site:
    """The store, clock and machines one test's controllers see."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.clock = FakeClock()
        self.machines = FakeMachines()
        self.events = EventRecorder(store)
        # Declared beside every controller herder runs: a field another one owns is not this one's.
        running = controllers(Store(MemoryBackend(), herder_registry()), ControllerOptions())
        self._declared: dict[str, Declaration] = declarations_of((c.name, c.outputs) for c in running)

    @classmethod
    async def start(cls) -> Site:
        # Sensitive kinds (ClusterSecrets, configs) are sealed in any store: a test key seals them here.
        store = Store(MemoryBackend(), herder_registry(), cipher=Cipher(bytes(range(32))))
        register_admission(store, ControllerOptions(managed_control_planes=True))
        await store.start()
        await store.create(obj("Namespace", NAMESPACE, namespaced=False, api_version="v1"))
        return cls(store)

    async def close(self) -> None:
        await self.store.close()

    def context(self, controller: Controller) -> Context:
        owners = dict(self._declared)
        if controller.name not in owners:  # a controller under test that herder does not run (yet)
            owners = declarations_of(
                [*((n, d.outputs) for n, d in owners.items()), (controller.name, controller.outputs)]
            )
        return Context(
            self.store,
            controller.name,
            controller.outputs,
            primary=controller.primary,
            events=self.events,
            clock=self.clock,
            owners=owners,
        )

    async def reconcile(self, controller: Controller, key: ObjectKey) -> Result | None:
        """One reconcile of ``key``, as the manager would run it."""
        assert key.kind == controller.primary or controller.primary == "*", key
        return await controller.reconcile(key, self.context(controller))

    @contextlib.asynccontextmanager
    async def running(self, *controllers: Controller) -> AsyncIterator[None]:
        """``controllers`` run as herder runs them (its manager: their watches, settling, real time), for
        what one reconcile cannot show: how many a burst of changes gets."""
        manager = Manager(self.store, list(controllers))
        task = asyncio.create_task(manager.run())
        try:
            await asyncio.wait_for(manager.wait_synced(), 10)
            yield
        finally:
            manager.stop()
            await task

    @contextlib.asynccontextmanager
    async def writes(self, kind: str, pick: Callable[[Resource], Any]) -> AsyncIterator[list[Any]]:
        """What ``pick`` reads from each write of ``kind`` from now on, in a list that grows meanwhile."""
        seen: list[Any] = []
        since = await self.store.revision()

        async def follow() -> None:
            async for event in self.store.watch(kind, resource_version=since):
                seen.append(pick(event.object))

        task = asyncio.create_task(follow())
        try:
            yield seen
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def show(
        self, controller: Controller, obj: Resource, *, before: Resource | None = None, deleted: bool = False
    ) -> list[ObjectKey]:
        """What the controller's watches of ``obj``'s kind map an event of it to, as it is now (changed from
        ``before``; ``deleted``: its deletion), keeping their indexes as the manager's watches would."""
        current = obj if deleted else await self.get(obj.kind, obj.name, obj.namespace)
        assert current is not None, f"{obj.kind} {obj.name} does not exist"
        event = WatchEvent(
            "DELETED" if deleted else "MODIFIED" if before is not None else "ADDED", current, previous=before
        )
        return sorted({key for w in controller.watches if w.kind == obj.kind for key in w.map(event)})

    async def create(self, *objects: Resource) -> list[Resource]:
        return [await self.store.create(o) for o in objects]

    async def get(self, kind: str, name: str, namespace: str | None = NAMESPACE) -> Resource | None:
        found = await self.store.list(kind, namespace)
        return next((o for o in found.items if o.name == name), None)

    async def status(self, kind: str, name: str, namespace: str | None = NAMESPACE) -> dict[str, Any]:
        found = await self.get(kind, name, namespace)
        assert found is not None, f"{kind} {name} does not exist"
        return found.status or {}

    async def set_status(self, target: Resource, **status: Any) -> Resource:
        """Give an object the status other controllers (or a provider) would have written."""
        current = await self.get(target.kind, target.name, target.namespace)
        assert current is not None
        return await self.store.update_status(
            current.model_copy(update={"status": {**(current.status or {}), **status}})
        )

    async def told(self, about: Resource | None = None) -> list[tuple[str, str, str]]:
        """The Events recorded (on ``about``), as (type, reason, message), oldest first."""
        listed = await self.store.list("Event", None)
        events = [
            e
            for e in listed.items
            if about is None or (e.model_extra or {})["involvedObject"]["name"] == about.name
        ]
        # In the order they were written (timestamps have whole seconds).
        events.sort(key=lambda e: int(e.metadata.resource_version or 0))
        return [
            (str(x["type"]), str(x["reason"]), str(x["message"]))
            for x in (e.model_extra or {} for e in events)
        ]

    async def cluster_secrets(self, cluster: Resource, contract: str = "1.13") -> Resource:
        """The ClusterSecrets its controller would have made (from the session's bundle)."""
        current = await self.get("Cluster", cluster.name, cluster.namespace)
        assert current is not None
        secrets = obj(
            "ClusterSecrets",
            cluster.name,
            spec={"bundle": secrets_bundle(contract), "talosContract": contract},
            metadata={
                "ownerReferences": [
                    {
                        "apiVersion": API,
                        "kind": "Cluster",
                        "name": current.name,
                        "uid": current.metadata.uid,
                        "controller": True,
                    }
                ]
            },
        )
        (made,) = await self.create(secrets)
        return made


async def eventually(check: Callable[[], bool], timeout: float = 10) -> None:
    """Wait until ``check`` holds (for what controllers that ``Site.running`` runs do in their time)."""
    async with asyncio.timeout(timeout):
        while not check():  # noqa: ASYNC110 - what it checks offers nothing to wait on
            await asyncio.sleep(0.02)


def names(objects: Iterable[Resource]) -> list[str]:
    return sorted(o.name for o in objects)
