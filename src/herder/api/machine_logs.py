"""The machine logs herder keeps (``herder.state.machine_logs``), served as Kubernetes serves a pod's:

    GET /apis/herder.dev/v1alpha1/namespaces/NS/machines/UUID/log    a machine's service logs
    GET /apis/herder.dev/v1alpha1/namespaces/NS/machines/UUID/dmesg  its kernel log

with ``service=ID`` (the log's service; every service's when left out, each line then led by
``SERVICE: ``), ``tailLines=N``, ``sinceSeconds=N``, ``timestamps=true`` (each line led by the RFC 3339
time herder received it) and ``follow=true`` (the answer goes on, a line as it comes, until the client
leaves). The answer is ``text/plain``, a line per line.

A caller reads the lines written while the machine was in a cluster it may read (Reader on that
cluster); lines of a hidden machine, or of a machine the platform manages (a managed control plane, whose
Talos API is closed to its users too), only platform staff read. So a machine's logs stay readable by
its cluster's readers after the machine was reset, and after it vanished and its Machine is gone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from herder.api import roles
from herder.api.policy import HerderPolicy
from herder.krm.policy import Access, Denied, Identity
from herder.krm.status import ApiError, api_error
from herder.resources.access import HIDDEN_LABEL, READ_ONLY_ANNOTATION
from herder.resources.configuration import GROUP, VERSION
from herder.resources.machines import CLUSTER_LABEL, MACHINE
from herder.state.errors import NotFound
from herder.state.machine_logs import KERNEL, LogEntry, LogScope, MachineLogs
from herder.state.store import Store

LOG = "log"
DMESG = "dmesg"
_TEXT = "text/plain; charset=utf-8"


def _count(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if not raw.isdigit():
        raise ApiError(400, f"{name}: expected a whole number of 0 or more, not {raw!r}")
    return int(raw)


def _flag(request: Request, name: str) -> bool:
    raw = request.query_params.get(name, "false").lower()
    if raw not in ("true", "false", "1", "0", ""):
        raise ApiError(400, f"{name}: expected true or false, not {raw!r}")
    return raw in ("true", "1")


def routes(store: Store, policy: HerderPolicy, logs: MachineLogs) -> list[Route]:
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/{MACHINE.plural}/{{name}}"

    def endpoint(subresource: str) -> Route:
        async def serve(request: Request) -> Response:
            return await _serve(request, subresource, store, policy, logs)

        return Route(f"{base}/{subresource}", serve, methods=["GET"])

    return [endpoint(LOG), endpoint(DMESG)]


class LogReader:
    """Which of a machine's kept lines ``who`` may read: those of the scopes it may see the machine in."""

    def __init__(self, policy: HerderPolicy, who: Identity, name: str) -> None:
        self._policy, self._who, self._name = policy, who, name

    def __call__(self, scope: LogScope) -> bool:
        if (scope.hidden or scope.managed) and not roles.sees_hidden(self._who.role):
            return False
        labels = {CLUSTER_LABEL: scope.cluster} if scope.cluster else {}
        if scope.hidden:
            labels[HIDDEN_LABEL] = "true"
        return self._policy.visible(self._who, MACHINE, self._name, labels)


async def _serve(
    request: Request, subresource: str, store: Store, policy: HerderPolicy, logs: MachineLogs
) -> Response:
    namespace, name = request.path_params["namespace"], request.path_params["name"]
    access = Access("get", MACHINE, namespace, name, subresource)
    who: Identity | None = None
    try:
        who = await policy.authenticate(request)
        policy.authorize(who, access)
        tail = _count(request, "tailLines")
        since_seconds = _count(request, "sinceSeconds")
        follow = _flag(request, "follow")
        timestamps = _flag(request, "timestamps")
        service = request.query_params.get("service") or None
        if subresource == DMESG and service is not None:
            raise ApiError(400, "service: the kernel log has no services (leave it out)")
        if service == KERNEL:
            raise ApiError(400, f"service: {KERNEL!r} is the kernel log: read it from {DMESG}")
        allowed = LogReader(policy, who, name)
        try:
            machine = await store.get(MACHINE, name, namespace)
        except NotFound:
            machine = None
        seen = machine is not None and policy.visible(who, MACHINE, name, machine.metadata.labels)
        managed = machine is not None and READ_ONLY_ANNOTATION in machine.metadata.annotations
        if seen and managed and not roles.sees_hidden(who.role):
            raise Denied(
                f'machine "{name}" is managed by the platform: its logs are open to platform staff only'
            )
        if not seen and not any(allowed(s) for s in logs.scopes(namespace, name)):
            raise NotFound(MACHINE.plural, name)
    except Exception as exc:
        error = api_error(exc, MACHINE, name)
        await policy.record(who, access, request, error.code, error.message)
        return error.response()
    await policy.record(who, access, request, 200)
    sources = [KERNEL] if subresource == DMESG else [service] if service else None
    since = time.time() - since_seconds if since_seconds is not None else None
    prefixed = sources is None

    def line(entry: LogEntry) -> str:
        return entry.line(prefixed=prefixed, timestamps=timestamps)

    if not follow:
        entries = await asyncio.to_thread(
            logs.entries, namespace, name, allowed=allowed, sources=sources, since=since, tail=tail
        )
        return Response("".join(line(e) for e in entries), 200, media_type=_TEXT)

    async def lines() -> AsyncIterator[str]:
        async for entry in logs.follow(
            namespace, name, allowed=allowed, sources=sources, since=since, tail=tail
        ):
            yield line(entry)

    return StreamingResponse(lines(), 200, media_type=_TEXT, headers={"X-Accel-Buffering": "no"})
