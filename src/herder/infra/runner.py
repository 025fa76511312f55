"""Running a provider against herder: the whole protocol of ``docs/providers.md`` over herder's public
API (a kubeconfig and a token), never its store.

The runner publishes the provider's schemas and heartbeats on its InfraProvider, watches the
MachineRequests labelled with its id (and, for providers that control power, its Machines), and works
on them with at most ``concurrency`` at a time:

- a new request gets the provider's finalizer, then its steps run in order, each step's progress and
  the provider's private state written to the request's status, so a restart resumes in the step it
  stopped in; a failed attempt is retried with exponential backoff, its error and the attempt count
  kept on the status until a later attempt succeeds; ``max_attempts`` failures fail it for good;
- a request being deleted waits until herder has released its machine (herder's finalizer gone), is
  deprovisioned (idempotently, retried with backoff) and loses the provider's finalizer;
- every ``resync_interval`` each provisioned machine is checked (``Provider.exists``): one gone is
  marked Failed with reason MachineGone;
- ``Machine.spec.power`` (on, off, ``rebootRequestID``) is carried out and reported on
  ``Machine.status.power``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from herder.client import ApiError, Client, Conflict, Gone, NotFound, TransportError, describe
from herder.infra.config import load_config
from herder.infra.provider import Fail, JoinConfig, Provider, RequestContext, Retry
from herder.resources import Resource
from herder.resources.access import INFRA_PROVIDER_LABEL
from herder.resources.machines import MACHINE
from herder.resources.provisioning import (
    INFRA_PROVIDER,
    JOIN_CONFIG,
    MACHINE_REQUEST,
    MACHINE_REQUEST_LABEL,
    PROVIDER_FINALIZER,
    RELEASE_FINALIZER,
    MachineRequestSpec,
)
from herder.workqueue import ShutDown, WorkQueue, retry_delay

log = logging.getLogger("herder.infra")

Key = tuple[str, str]  # (namespace, name)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class RunOptions:
    concurrency: int = 8
    heartbeat_interval: float = 10.0
    resync_interval: float = 30.0
    max_attempts: int = 10
    backoff_first: float = 1.0
    backoff_max: float = 60.0
    progress_after: float = 5.0
    """How long a request's progress may go untold: a step (or a wait, Retry) that takes longer is
    written as it runs; quicker ones are told by the next write (each write is a store write of herder's,
    and audited)."""
    config_file: Path | None = None
    config: dict[str, Any] | None = None
    """Settings given to the runner (a command line's): they win over herder's and the file's."""


class ProviderRunner:
    def __init__(
        self,
        provider: Provider[Any, Any],
        client: Client,
        provider_id: str,
        options: RunOptions | None = None,
    ) -> None:
        self.provider = provider
        self.client = client
        self.provider_id = provider_id
        self.options = options or RunOptions()
        self.config: BaseModel | None = None
        self.join = JoinConfig()
        self._requests: dict[Key, Resource] = {}
        # One reconcile per request at a time; a change meanwhile runs it again (as controllers' queues).
        self._queue: WorkQueue[Key] = WorkQueue()
        # When a request waiting (Retry) or backing off may be worked on again: other changes to it
        # (herder's finalizer, the echo of its own status write) do not cut the wait short.
        self._not_before: dict[Key, float] = {}
        # The resourceVersion of the runner's own last write of each request: its echo is no news.
        self._written: dict[Key, str] = {}
        # The status each request is at, when it is ahead of the one written (progress not told yet),
        # and when each request's status was last written (or its provisioning began).
        self._untold: dict[Key, dict[str, Any]] = {}
        self._told_at: dict[Key, float] = {}
        self._machine_work: dict[Key, asyncio.Task[None]] = {}
        self._slots = asyncio.Semaphore(self.options.concurrency)
        self._selector = f"{INFRA_PROVIDER_LABEL}={provider_id}"

    # --- the whole ---

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Run until ``stop`` is set (or forever); herder being away is waited out, not fatal."""
        stop = stop or asyncio.Event()
        provider = await self._publish()
        self.config = self._config(provider)
        await self._read_join()
        await self.provider.start(self.config)
        loops: list[Coroutine[Any, Any, None]] = [
            self._heartbeat(),
            self._watch(MACHINE_REQUEST.plural, self._request_event),
            self._resync(),
            *(self._work() for _ in range(self.options.concurrency)),
        ]
        if self.provider.supports_power:
            loops.append(self._watch(MACHINE.plural, self._machine_event))
        tasks = [asyncio.create_task(loop) for loop in loops]
        stopped = asyncio.create_task(stop.wait())
        try:
            done, _ = await asyncio.wait({*tasks, stopped}, return_when=asyncio.FIRST_COMPLETED)
            for task in done - {stopped}:
                task.result()
        finally:
            self._queue.shut_down()
            for task in [*tasks, stopped, *self._machine_work.values()]:
                task.cancel()
            await asyncio.gather(*tasks, stopped, *self._machine_work.values(), return_exceptions=True)
            await self.provider.stop()

    async def _publish(self) -> Resource:
        """Publish schemas, version and capabilities, with a first heartbeat; the InfraProvider as it is."""
        status = {
            "schema": self.provider.data_schema(),
            "configSchema": self.provider.config_schema(),
            "version": self.provider.version,
            "capabilities": {"power": self.provider.supports_power},
        }
        return await self._beat(status)

    async def _beat(self, extra: dict[str, Any] | None = None) -> Resource:
        status = {
            **(extra or {}),
            "lastHeartbeat": now(),
            "heartbeatIntervalSeconds": self.options.heartbeat_interval,
        }
        try:
            return await self.client.patch(
                INFRA_PROVIDER, self.provider_id, {"status": status}, subresource="status"
            )
        except NotFound:
            raise NotFound(
                404,
                f"infra provider {self.provider_id!r} is not registered with herder: an Admin registers it "
                f"with `herder infraprovider create {self.provider_id}`",
            ) from None

    def _config(self, provider: Resource) -> BaseModel:
        """The config herder holds for the provider (re-read at every heartbeat), else the file's or the
        environment's."""
        return load_config(
            self.provider.config_model,
            (provider.spec or {}).get("config"),
            self.options.config_file,
            overrides=self.options.config,
        )

    async def _read_join(self) -> None:
        try:
            join = await self.client.get(JOIN_CONFIG, self.provider_id)
        except (NotFound, ApiError):
            return  # not made yet: machines can still be reported by address
        spec = join.spec or {}
        self.join = JoinConfig(
            str(spec.get("endpoint", "")), str(spec.get("token", "")), tuple(spec.get("kernelArgs") or ())
        )

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.options.heartbeat_interval)
            try:
                self.config = self._config(await self._beat())
            except (TransportError, ApiError, ValueError) as exc:
                log.warning("provider %s: heartbeat failed: %s", self.provider_id, exc)

    # --- watching ---

    async def _watch(self, plural: str, handle: Callable[[str, Resource], None]) -> None:
        """List and watch one kind's objects of this provider, for ever, re-listing when the watch
        cannot resume; objects gone meanwhile are handed on as DELETED."""
        known: dict[Key, Resource] = {}
        while True:
            try:
                listed = await self.client.list(plural, None, label_selector=self._selector)
                seen = {_key(o): o for o in listed.items}
                for key, obj in known.items():
                    if key not in seen:
                        handle("DELETED", obj)
                known = seen
                for obj in listed.items:
                    handle("ADDED", obj)
                rv = listed.resource_version
                async for event in self._events(plural, rv):
                    if event[0] == "DELETED":
                        known.pop(_key(event[1]), None)
                    else:
                        known[_key(event[1])] = event[1]
                    handle(*event)
            except (TransportError, ApiError) as exc:
                if not isinstance(exc, Gone):
                    log.warning("provider %s: watching %s: %s", self.provider_id, plural, exc)
                    await asyncio.sleep(1.0)

    async def _events(self, plural: str, rv: str) -> AsyncIterator[tuple[str, Resource]]:
        while True:
            async for event in self.client.watch(
                plural, None, resource_version=rv, label_selector=self._selector, timeout_seconds=300
            ):
                rv = event.object.metadata.resource_version or rv
                if event.type in ("ADDED", "MODIFIED", "DELETED"):
                    yield event.type, event.object

    def _request_event(self, type_: str, request: Resource) -> None:
        key = _key(request)
        if type_ == "DELETED":
            self._forget(key)
            return
        before = self._requests.get(key)
        if request.metadata.deletion_timestamp and (before is None or not before.metadata.deletion_timestamp):
            self._not_before.pop(key, None)  # a deletion does not wait for a provisioning retry
        self._requests[key] = request
        if self._written.get(key) != request.metadata.resource_version:
            self._enqueue(key)

    def _forget(self, key: Key) -> None:
        for known in (self._requests, self._written, self._untold, self._told_at):
            known.pop(key, None)

    # --- the work queue ---

    def _enqueue(self, key: Key) -> None:
        self._queue.add(key)

    def _later(self, key: Key, seconds: float) -> None:
        self._not_before[key] = time.monotonic() + seconds
        self._queue.add_after(key, seconds)

    async def _work(self) -> None:
        while True:
            try:
                key = await self._queue.get()
            except ShutDown:
                return
            try:
                async with self._slots:
                    await self._reconcile(key)
            except (TransportError, ApiError) as exc:
                log.warning("provider %s: request %s/%s: %s", self.provider_id, *key, exc)
                self._later(key, 2.0)
            except Exception:
                log.exception("provider %s: request %s/%s", self.provider_id, *key)
                self._later(key, 5.0)
            finally:
                self._queue.done(key)

    async def _reconcile(self, key: Key) -> None:
        try:
            request = await self.client.get(MACHINE_REQUEST, key[1], key[0])
        except NotFound:
            self._forget(key)
            return
        if self._not_before.get(key, 0.0) > time.monotonic():
            return  # waiting or backing off: its delayed add brings it back
        self._not_before.pop(key, None)
        if request.metadata.deletion_timestamp:
            await self._deprovision(request)
            return
        request = await self._finalizer(request, add=True)
        stage = (request.status or {}).get("stage")
        if stage in ("Provisioned", "Failed"):
            return
        await self._provision(request)

    # --- provisioning ---

    def _context(self, request: Resource, status: dict[str, Any]) -> RequestContext[Any, Any]:
        spec = MACHINE_REQUEST.spec_of(request, MachineRequestSpec)
        try:
            data = self.provider.data_model.model_validate(spec.provider_data)
        except ValidationError as exc:
            raise Fail(f"providerData: {exc.errors()[0]['msg']}", reason="InvalidProviderData") from None
        machine = status.get("machine") or {}
        assert self.config is not None
        return RequestContext(
            request=request,
            spec=spec,
            data=data,
            config=self.config,
            join=self.join,
            client=self.client,
            provider_id=self.provider_id,
            state=dict(status.get("providerState") or {}),
            attempt=int(status.get("attempts") or 0) + 1,
            machine_uuid=str(machine.get("uuid") or ""),
            machine_address=str(machine.get("address") or ""),
        )

    async def _provision(self, request: Resource) -> None:
        """Run the request's steps from the one it is at. Its status is written when there is news a user
        or a restart needs: a failure, the provider's state changed, the request provisioned or failed, or
        progress untold for ``progress_after`` seconds (a step or a wait that takes long)."""
        key = _key(request)
        status = self._untold.pop(key, None) or dict(request.status or {})
        self._told_at.setdefault(key, time.monotonic())
        steps = list(self.provider.steps())
        names = [s.name for s in steps]
        first = names.index(status["step"]) if status.get("step") in names else 0
        try:
            ctx = self._context(request, status)
        except Fail as exc:
            await self._write(request, {**status, **_failed(str(exc), exc.reason)})
            return
        for index in range(first, len(steps)):
            step = steps[index]
            if status.get("stage") != "Provisioning" or status.get("step") != step.name:
                status.update(_at(step.name, index, len(steps)))
            ctx.attempt = int(status.get("attempts") or 0) + 1
            try:
                await self._run_step(request, step.run(ctx), status)
            except Retry as exc:
                status.update(message=str(exc), providerState=ctx.state)
                await self._tell(request, status)
                self._later(key, exc.after)
                return
            except Fail as exc:
                status.update(providerState=ctx.state, **_failed(str(exc), exc.reason))
                await self._write(request, status)
                return
            except Exception as exc:
                attempts = int(status.get("attempts") or 0) + 1
                error = describe(exc)
                status.update(
                    providerState=ctx.state, attempts=attempts, lastError={"message": error, "time": now()}
                )
                if attempts >= self.options.max_attempts:
                    status.update(
                        stage="Failed",
                        reason="ProvisioningFailed",
                        message=f"gave up after {attempts} attempts",
                    )
                    await self._write(request, status)
                    return
                delay = retry_delay(attempts, self.options.backoff_first, self.options.backoff_max)
                status["message"] = (
                    f"step {step.name} failed (attempt {attempts}); trying again in {delay:g}s"
                )
                await self._write(request, status)
                self._later(key, delay)
                return
            # The step succeeded: its error (if any) goes, and the next step is recorded with its state.
            status.pop("lastError", None)
            status.update(attempts=0, providerState=ctx.state)
            if ctx.machine_uuid:
                status["machine"] = {"uuid": ctx.machine_uuid, "address": ctx.machine_address}
            if index + 1 < len(steps):
                status.update(_at(steps[index + 1].name, index + 1, len(steps)))
                await self._tell(request, status)
        if not ctx.machine_uuid:
            status.update(_failed("the provider's steps reported no machine (set_machine)", "NoMachine"))
        else:
            status.update(stage="Provisioned", message="provisioned", reason="")
        await self._write(request, status)

    async def _run_step(self, request: Resource, step: Awaitable[None], status: dict[str, Any]) -> None:
        """Run a step; should it outlast the time progress may go untold, the status (at that step) is
        written while it runs."""
        key = _key(request)
        writing = asyncio.Event()

        async def progress() -> None:
            await asyncio.sleep(self._told_at.get(key, 0.0) + self.options.progress_after - time.monotonic())
            writing.set()
            await self._write(request, dict(status))

        told = asyncio.create_task(progress())
        try:
            await step
        finally:
            if writing.is_set():
                with contextlib.suppress(TransportError, ApiError):
                    await told  # a write under way ends before the next one starts
            else:
                told.cancel()

    async def _tell(self, request: Resource, status: dict[str, Any]) -> None:
        """Write the status if a user or a restart needs it now (the provider's state changed, or its
        progress went untold too long); else keep it until the next write."""
        key = _key(request)
        stored = self._requests.get(key, request).status or {}
        overdue = time.monotonic() - self._told_at.get(key, 0.0) >= self.options.progress_after
        if overdue or status.get("providerState") != (stored.get("providerState") or {}):
            await self._write(request, status)
        elif status != stored:
            self._untold[key] = dict(status)

    async def _write(self, request: Resource, status: dict[str, Any]) -> Resource:
        """Write the request's status whole (only this provider writes it)."""
        key = _key(request)
        self._untold.pop(key, None)
        patch = [{"op": "add", "path": "/status", "value": status}]
        updated = await self.client.patch(
            MACHINE_REQUEST, request.name, patch, request.namespace, type="json", subresource="status"
        )
        self._requests[key] = updated
        self._written[key] = updated.metadata.resource_version or ""
        self._told_at[key] = time.monotonic()
        return updated

    async def _finalizer(self, request: Resource, *, add: bool) -> Resource:
        """Add or drop the provider's finalizer, on the newest request (herder changes its own meanwhile)."""
        for _ in range(10):
            has = PROVIDER_FINALIZER in request.metadata.finalizers
            if has == add:
                return request
            changed = request.clone()
            others = [f for f in request.metadata.finalizers if f != PROVIDER_FINALIZER]
            changed.metadata.finalizers = [*others, PROVIDER_FINALIZER] if add else others
            try:
                return await self.client.update(changed)
            except Conflict:
                request = await self.client.get(MACHINE_REQUEST, request.name, request.namespace)
        raise Conflict(409, f"request {request.name} keeps changing: its finalizer is set on the next try")

    # --- deprovisioning ---

    async def _deprovision(self, request: Resource) -> None:
        finalizers = request.metadata.finalizers
        if PROVIDER_FINALIZER not in finalizers or RELEASE_FINALIZER in finalizers:
            return  # not ours, or herder still releases the machine: its change brings us back
        status = dict(request.status or {})
        try:
            ctx = self._context(request, status)
        except Fail:
            ctx = self._context(
                request.model_copy(update={"spec": {**(request.spec or {}), "providerData": {}}}), status
            )
        try:
            await self.provider.deprovision(ctx)
        except Exception as exc:
            attempts = int(status.get("attempts") or 0) + 1
            error = f"deprovisioning failed: {describe(exc)}"
            status.update(attempts=attempts, lastError={"message": error, "time": now()}, message=error)
            await self._write(request, status)
            self._later(
                _key(request), retry_delay(attempts, self.options.backoff_first, self.options.backoff_max)
            )
            return
        await self._finalizer(request, add=False)

    # --- resync: machines gone behind herder's back ---

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.options.resync_interval)
            provisioned = [
                r
                for r in list(self._requests.values())
                if (r.status or {}).get("stage") == "Provisioned" and not r.metadata.deletion_timestamp
            ]
            await asyncio.gather(*(self._check(r) for r in provisioned), return_exceptions=True)

    async def _check(self, request: Resource) -> None:
        async with self._slots:
            status = dict(request.status or {})
            try:
                alive = await self.provider.exists(self._context(request, status))
            except Exception as exc:
                log.warning("provider %s: checking %s: %s", self.provider_id, request.name, describe(exc))
                return
            if alive:
                return
            uuid = (status.get("machine") or {}).get("uuid", "")
            message = f"machine {uuid} no longer exists: it was destroyed outside herder"
            status.update(stage="Failed", reason="MachineGone", message=message)
            status["lastError"] = {"message": message, "time": now()}
            with contextlib.suppress(NotFound):
                await self._write(request, status)

    # --- power ---

    def _machine_event(self, type_: str, machine: Resource) -> None:
        if type_ == "DELETED" or not _power_asked(machine):
            return
        key = _key(machine)
        running = self._machine_work.get(key)
        if running is not None and not running.done():
            return  # the task reads the newest machine again when it ends
        self._machine_work[key] = asyncio.create_task(self._power(key))

    async def _power(self, key: Key) -> None:
        for _ in range(100):  # while the wanted power keeps changing under it
            try:
                machine = await self.client.get(MACHINE, key[1], key[0])
                if not await self._power_once(machine):
                    return
            except (TransportError, ApiError) as exc:
                log.warning("provider %s: power of %s: %s", self.provider_id, key[1], exc)
                await asyncio.sleep(2.0)
            except Exception:
                log.exception("provider %s: power of %s", self.provider_id, key[1])
                await asyncio.sleep(5.0)

    async def _power_once(self, machine: Resource) -> bool:
        """Carry out what ``spec.power`` asks that ``status.power`` does not show done; whether it did."""
        if not _power_asked(machine):
            return False
        wanted = (machine.spec or {}).get("power") or {}
        shown = dict((machine.status or {}).get("power") or {"on": True})
        request_name = machine.metadata.labels.get(MACHINE_REQUEST_LABEL, "")
        request = self._requests.get((machine.namespace or "default", request_name))
        if request is None:
            return False
        ctx = self._context(request, dict(request.status or {}))
        on = bool(wanted.get("on", True))
        reboot = str(wanted.get("rebootRequestID") or "")
        acted = False
        async with self._slots:
            if on != bool(shown.get("on", True)):
                await self.provider.power(ctx, on)
                shown["on"] = on
                acted = True
            if reboot and reboot != shown.get("lastRebootID") and on:
                await self.provider.reboot(ctx)
                shown["lastRebootID"] = reboot
                acted = True
        if acted:
            await self.client.patch(
                MACHINE, machine.name, {"status": {"power": shown}}, machine.namespace, subresource="status"
            )
        return acted


def _power_asked(machine: Resource) -> bool:
    """Whether ``spec.power`` asks for what ``status.power`` does not show done."""
    wanted = (machine.spec or {}).get("power")
    if not wanted or machine.metadata.deletion_timestamp:
        return False
    shown = (machine.status or {}).get("power") or {}
    on = bool(wanted.get("on", True))
    if on != bool(shown.get("on", True)):
        return True
    reboot = str(wanted.get("rebootRequestID") or "")
    return on and bool(reboot) and reboot != shown.get("lastRebootID")


def _key(obj: Resource) -> Key:
    return (obj.namespace or "default", obj.name)


def _at(step: str, index: int, total: int) -> dict[str, Any]:
    return {
        "stage": "Provisioning",
        "step": step,
        "stepNumber": index + 1,
        "steps": total,
        "message": f"running step {step} ({index + 1}/{total})",
    }


def _failed(message: str, reason: str) -> dict[str, Any]:
    return {
        "stage": "Failed",
        "reason": reason,
        "message": message,
        "lastError": {"message": message, "time": now()},
    }


async def run_provider(
    provider: Provider[Any, Any],
    client: Client,
    provider_id: str,
    options: RunOptions | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Run ``provider`` as ``provider_id`` until ``stop`` is set; herder unreachable at first is retried."""
    runner = ProviderRunner(provider, client, provider_id, options)
    delay = 1.0
    started = time.monotonic()
    while True:
        try:
            await runner.run(stop)
            return
        except TransportError as exc:
            log.warning(
                "provider %s: herder is not reachable (%s): trying again in %gs", provider_id, exc, delay
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0) if time.monotonic() - started > 5 else delay
