"""Objects the CLI follows while it waits: each kind listed once, then kept current by a watch (listed
again when the watch ends or its revision is gone), so a command reacts to a change as it happens
instead of polling."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from types import TracebackType

from herder.client import Client, Gone, TransportError
from herder.resources import KindInfo, Resource

_RESUME = 0.2


class Watched:
    """The live objects of several kinds, each matching a selector, by kind and then name."""

    def __init__(self, client: Client, namespace: str) -> None:
        self._client = client
        self._namespace = namespace
        self._queries: list[tuple[KindInfo, str | None, str | None]] = []
        self.objects: dict[str, dict[str, Resource]] = {}
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._listed: list[asyncio.Event] = []
        self._failure: BaseException | None = None

    def follow(self, info: KindInfo, *, labels: str | None = None, fields: str | None = None) -> Watched:
        self._queries.append((info, labels, fields))
        self.objects.setdefault(info.kind, {})
        return self

    def of(self, info: KindInfo) -> list[Resource]:
        return sorted(self.objects.get(info.kind, {}).values(), key=lambda o: o.name)

    def get(self, info: KindInfo, name: str) -> Resource | None:
        return self.objects.get(info.kind, {}).get(name)

    async def __aenter__(self) -> Watched:
        for info, labels, fields in self._queries:
            listed = asyncio.Event()
            self._listed.append(listed)
            self._tasks.append(asyncio.create_task(self._run(info, labels, fields, listed)))
        try:
            await self.until(lambda: all(e.is_set() for e in self._listed), None)
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    async def _run(
        self, info: KindInfo, labels: str | None, fields: str | None, listed: asyncio.Event
    ) -> None:
        try:
            while True:
                result = await self._client.list(
                    info, self._namespace, label_selector=labels, field_selector=fields
                )
                self.objects[info.kind] = {o.name: o for o in result.items}
                listed.set()
                self._changed.set()
                await self._follow(info, labels, fields, result.resource_version)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a list the server refuses or cannot answer ends the wait with its error
            self._failure = exc
            self._changed.set()

    async def _follow(self, info: KindInfo, labels: str | None, fields: str | None, version: str) -> None:
        """Apply the changes after ``version`` until the revision is gone (then the caller lists again);
        a watch that ends or breaks is resumed from the last change seen."""
        objects = self.objects[info.kind]
        while True:
            try:
                async for event in self._client.watch(
                    info,
                    self._namespace,
                    resource_version=version or None,
                    label_selector=labels,
                    field_selector=fields,
                ):
                    version = event.object.metadata.resource_version or version
                    if event.type == "BOOKMARK":
                        continue
                    if event.type == "DELETED":
                        objects.pop(event.object.name, None)
                    else:
                        objects[event.object.name] = event.object
                    self._changed.set()
            except Gone:
                return
            except TransportError:
                pass  # a long quiet watch times out on the client's side: resume it
            await asyncio.sleep(_RESUME)

    async def until(
        self,
        done: Callable[[], bool],
        timeout: float | None,
        on_change: Callable[[], None] | None = None,
    ) -> bool:
        """Wait until ``done()`` holds (True) or ``timeout`` seconds pass (False; None: no limit);
        ``on_change`` is called once at the start and after every change."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._raise_failure()
            if on_change is not None:
                on_change()
            if done():
                return True
            self._changed.clear()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
