"""The Job controller and the kubelet's run-to-completion of one emulated cluster: a batch/v1 Job gets a pod
from its template (labels ``job-name`` and ``controller-uid``, owned by the Job); once the scheduler has put
the pod on a node, each container runs its command as ``containers.run`` knows commands (``true``,
``false``, ``sh -c "exit N"``, ``sleep S`` — which takes S seconds —, their combinations); the pod ends
``Succeeded`` when every container exits 0, else ``Failed`` with each container's exit code. A failed pod is
replaced until the Job's ``backoffLimit`` (default 6) is spent; then the Job is ``Failed``
(``BackoffLimitExceeded``); one pod that succeeds makes it ``Complete``. ``activeDeadlineSeconds`` fails a
Job that runs longer (``DeadlineExceeded``). Deleting a Job deletes its pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import datetime
from typing import Any

from herder.emu.cluster.containers import NOT_FOUND, Container, Process, run
from herder.emu.cluster.manifests import short_hash
from herder.resources import Resource, now_rfc3339
from herder.resources.kubernetes import JOB, POD
from herder.state.errors import NotFound, StateError
from herder.state.store import Store

log = logging.getLogger(__name__)

DEFAULT_BACKOFF_LIMIT = 6
JOB_NAME = "job-name"
CONTROLLER_UID = "controller-uid"
_TERMINAL = ("Succeeded", "Failed")


async def _no_input() -> bytes:
    return b""


def _ignore(_: bytes) -> None:
    pass


class Jobs:
    """Runs the Jobs of one cluster's API (its store) and their pods' containers."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._running: dict[str, asyncio.Task[None]] = {}
        """The containers being run, by pod uid."""
        self._deadlines: dict[str, asyncio.TimerHandle] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._watch(JOB.kind)), loop.create_task(self._watch(POD.kind))]

    async def close(self) -> None:
        for handle in self._deadlines.values():
            handle.cancel()
        tasks = [*self._tasks, *self._running.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _watch(self, kind: str) -> None:
        while True:
            try:
                async for event in self.store.watch(kind, send_initial_events=True):
                    obj = event.object
                    if obj is None:
                        continue
                    try:
                        if kind == JOB.kind:
                            await self._job_changed(event.type, obj)
                        elif JOB_NAME in obj.metadata.labels:
                            await self._pod_changed(event.type, obj)
                    except (StateError, NotFound) as exc:
                        log.debug("job %s: %s", obj.name, exc)
            except StateError:
                await asyncio.sleep(0.1)

    # --- the Job controller ---

    async def _job_changed(self, event: str, job: Resource) -> None:
        namespace = job.namespace or "default"
        if event == "DELETED":
            handle = self._deadlines.pop(job.metadata.uid or "", None)
            if handle is not None:
                handle.cancel()
            for pod in await self._pods(job):
                with contextlib.suppress(NotFound):
                    await self.store.delete(POD, pod.name, namespace)
            return
        if event not in ("ADDED", "MODIFIED") or job.metadata.deletion_timestamp:
            return
        await self._reconcile(job)

    async def _pods(self, job: Resource) -> list[Resource]:
        pods = await self.store.list(
            POD, job.namespace, label_selector=f"{CONTROLLER_UID}={job.metadata.uid}"
        )
        return list(pods.items)

    async def _reconcile(self, job: Resource) -> None:
        status = dict(job.status or {})
        if _finished(status):
            return
        spec = job.spec or {}
        pods = await self._pods(job)
        succeeded = sum(1 for p in pods if (p.status or {}).get("phase") == "Succeeded")
        failed = sum(1 for p in pods if (p.status or {}).get("phase") == "Failed")
        active = len(pods) - succeeded - failed
        limit = spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT)
        now = now_rfc3339()
        status.setdefault("startTime", now)
        deadline = spec.get("activeDeadlineSeconds")
        if deadline:
            self._deadline(job, float(deadline), status["startTime"])
        if succeeded:
            status["conditions"] = [
                _condition(
                    "SuccessCriteriaMet",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                    now,
                ),
                _condition("Complete", "", "", now),
            ]
            status["completionTime"] = now
        elif failed > limit:
            message = "Job has reached the specified backoff limit"
            status["conditions"] = [
                _condition("FailureTarget", "BackoffLimitExceeded", message, now),
                _condition("Failed", "BackoffLimitExceeded", message, now),
            ]
        elif not active:
            await self._create_pod(job, failed)
            active = 1
        status.update(
            {"active": active if not _finished(status) else 0, "succeeded": succeeded, "failed": failed}
        )
        if status != (job.status or {}):
            await self._write_status(job, status)

    def _deadline(self, job: Resource, seconds: float, started: str) -> None:
        uid = job.metadata.uid or ""
        if uid in self._deadlines:
            return
        elapsed = time.time() - _epoch(started)
        loop = asyncio.get_running_loop()

        def expire() -> None:
            self._tasks.append(loop.create_task(self._expire(job)))

        self._deadlines[uid] = loop.call_later(max(seconds - elapsed, 0.0), expire)

    async def _expire(self, job: Resource) -> None:
        try:
            current = await self.store.get(JOB, job.name, job.namespace)
        except NotFound:
            return
        status = dict(current.status or {})
        if _finished(status):
            return
        now = now_rfc3339()
        message = "Job was active longer than specified deadline"
        status["conditions"] = [
            _condition("FailureTarget", "DeadlineExceeded", message, now),
            _condition("Failed", "DeadlineExceeded", message, now),
        ]
        status["active"] = 0
        await self._write_status(current, status)
        for pod in await self._pods(current):
            task = self._running.pop(pod.metadata.uid or "", None)
            if task is not None:
                task.cancel()
            with contextlib.suppress(NotFound):
                await self.store.delete(POD, pod.name, pod.namespace)

    async def _write_status(self, job: Resource, status: dict[str, Any]) -> None:
        for _ in range(5):
            try:
                current = await self.store.get(JOB, job.name, job.namespace)
                if current.metadata.uid != job.metadata.uid:
                    return
                await self.store.update_status(current.model_copy(update={"status": status}))
                return
            except NotFound:
                return
            except StateError:
                await asyncio.sleep(0.05)

    async def _create_pod(self, job: Resource, attempt: int) -> None:
        template = (job.spec or {}).get("template") or {}
        meta = template.get("metadata") or {}
        spec = dict(template.get("spec") or {})
        spec.setdefault("restartPolicy", "Never")
        uid = job.metadata.uid or ""
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{job.name}-{short_hash(uid, str(attempt))}",
                "namespace": job.namespace,
                "labels": {
                    **(meta.get("labels") or {}),
                    JOB_NAME: job.name,
                    "batch.kubernetes.io/job-name": job.name,
                    CONTROLLER_UID: uid,
                    "batch.kubernetes.io/controller-uid": uid,
                },
                "annotations": dict(meta.get("annotations") or {}),
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job.name,
                        "uid": uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": spec,
        }
        with contextlib.suppress(StateError):
            await self.store.create(Resource.model_validate(pod))

    # --- the kubelet, running a Job's pod to its end ---

    async def _pod_changed(self, event: str, pod: Resource) -> None:
        uid = pod.metadata.uid or ""
        status = pod.status or {}
        if event == "DELETED":
            task = self._running.pop(uid, None)
            if task is not None:
                task.cancel()
        elif status.get("phase") in _TERMINAL:
            await self._job_of(pod)
        elif status.get("phase") == "Running" and uid not in self._running:
            self._running[uid] = asyncio.get_running_loop().create_task(self._run(pod))

    async def _job_of(self, pod: Resource) -> None:
        try:
            job = await self.store.get(JOB, pod.metadata.labels[JOB_NAME], pod.namespace)
        except NotFound:
            return
        if job.metadata.uid == pod.metadata.labels.get(CONTROLLER_UID):
            await self._reconcile(job)

    async def _run(self, pod: Resource) -> None:
        data = pod.to_dict()
        node = data["spec"].get("nodeName", "")
        codes: dict[str, int] = {}
        for spec in data["spec"].get("containers") or ():
            container = Container.of(data, spec, node)
            process = Process(out=_ignore, err=_ignore, stdin=_no_input)
            await run(container, list(container.command), process)
            codes[container.name] = NOT_FOUND if process.not_found else process.code
        await self._finish(pod, codes)

    async def _finish(self, pod: Resource, codes: dict[str, int]) -> None:
        for _ in range(5):
            try:
                current = await self.store.get(POD, pod.name, pod.namespace)
            except NotFound:
                return
            if current.metadata.uid != pod.metadata.uid:
                return
            status = dict(current.status or {})
            now = now_rfc3339()
            failed = any(codes.values())
            status["phase"] = "Failed" if failed else "Succeeded"
            statuses = []
            for cs in status.get("containerStatuses") or ():
                code = codes.get(cs.get("name", ""), 0)
                started = ((cs.get("state") or {}).get("running") or {}).get("startedAt", now)
                terminated = {
                    "exitCode": code,
                    "reason": "Error" if code else "Completed",
                    "startedAt": started,
                    "finishedAt": now,
                }
                statuses.append({**cs, "ready": False, "started": False, "state": {"terminated": terminated}})
            status["containerStatuses"] = statuses
            status["conditions"] = [
                {**c, "status": "False", "reason": "PodCompleted"}
                if c.get("type") in ("Ready", "ContainersReady")
                else c
                for c in status.get("conditions") or ()
            ]
            try:
                await self.store.update_status(current.model_copy(update={"status": status}))
            except StateError:
                await asyncio.sleep(0.05)
                continue
            self._running.pop(pod.metadata.uid or "", None)
            return


def _finished(status: dict[str, Any]) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )


def _condition(kind: str, reason: str, message: str, now: str) -> dict[str, Any]:
    out = {"type": kind, "status": "True", "lastProbeTime": now, "lastTransitionTime": now}
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


def _epoch(stamp: str) -> float:
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return time.time()
