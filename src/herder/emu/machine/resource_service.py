"""The gRPC ``cosi.resource.State`` of every emulated machine (Talos's resource API, what ``talosctl get``
reads), served by the same internal server as the machine API and behind the same listeners: without a
client certificate in maintenance mode, with mutual TLS once configured.

Calls are routed as apid routes them (``routing``): to the machine dialled or the one the ``node``
metadata names; apid proxies this service one-to-one only, so a ``nodes`` list is refused. Only reads
are served: machined refuses writes over its API.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import grpc

from herder.emu.errors import ApiError
from herder.emu.machine.lifecycle import Machine
from herder.emu.machine.resources import check_access, selects
from herder.emu.machine.routing import Context, Fleet, Router
from herder.emu.machine.state_resources import attach
from herder.talos.api.cosi import state_pb2, state_pb2_grpc
from herder.talos.machine import roles
from herder.talos.machine.resources import ResourceEventType


class ResourceService(state_pb2_grpc.StateServicer):
    def __init__(self, fleet: Fleet) -> None:
        self.router = Router(fleet)

    async def _machine(self, name: str, namespace: str, type: str, context: Context) -> Machine:
        """The machine a call reads, once it may read that type in that namespace, with what it derives
        from its state up to date."""
        method = f"/{roles.RESOURCE_SERVICE}/{name}"
        peer, machine = await self.router.single(
            method, context, one_to_many=f"one-2-many proxying is not supported for method {method}"
        )
        try:
            check_access(namespace, type, peer.roles)
        except ApiError as e:
            await context.abort(e.code, e.message)
        state = machine.resources
        attach(machine, state)
        state.refresh()
        return machine

    async def Get(self, request: state_pb2.GetRequest, context: Context) -> state_pb2.GetResponse:
        machine = await self._machine("Get", request.namespace, request.type, context)
        entry = machine.resources.get(request.namespace, request.type, request.id)
        if entry is None:
            pointer = f"{request.type}({request.namespace}/{request.id}@undefined)"
            await context.abort(grpc.StatusCode.NOT_FOUND, f"resource {pointer} doesn't exist")
            raise AssertionError("unreachable")
        return state_pb2.GetResponse(resource=entry.encode())

    # grpc.aio recognises streaming handlers by being async generator functions.
    async def List(
        self, request: state_pb2.ListRequest, context: Context
    ) -> AsyncIterator[state_pb2.ListResponse]:
        machine = await self._machine("List", request.namespace, request.type, context)
        options = request.options
        await _check_id_query(options.id_query.regexp, context)
        for entry in machine.resources.list(request.namespace, request.type):
            if selects(entry.metadata, options.label_query, options.id_query.regexp):
                yield state_pb2.ListResponse(resource=entry.encode())

    async def Watch(
        self, request: state_pb2.WatchRequest, context: Context
    ) -> AsyncIterator[state_pb2.WatchResponse]:
        machine = await self._machine("Watch", request.namespace, request.type, context)
        options = request.options
        one = request.id if request.HasField("id") else None
        if one is not None and options.bootstrap_contents:
            await context.abort(
                grpc.StatusCode.UNIMPLEMENTED, "bootstrap contents is not implemented for resource watch"
            )
        if one is not None and options.label_query:
            await context.abort(
                grpc.StatusCode.UNIMPLEMENTED, "label query is not implemented for resource watch"
            )
        if options.tail_events > 0 or options.HasField("start_from_bookmark"):
            # machined can replay recent events; the emulator keeps none.
            await context.abort(
                grpc.StatusCode.UNIMPLEMENTED, "the emulator keeps no past resource events to replay"
            )
        await _check_id_query(options.id_query.regexp, context)
        # An empty message first: the watch is set up.
        yield state_pb2.WatchResponse()
        changes = machine.resources.watch(
            request.namespace, request.type, one, bootstrap=options.bootstrap_contents
        )
        async for change in changes:
            if change.type is ResourceEventType.BOOTSTRAPPED:
                if request.api_version < 1:
                    continue
            elif one is None and not selects(
                change.entry.metadata, options.label_query, options.id_query.regexp
            ):
                continue
            event = state_pb2.Event(event_type=int(change.type), resource=change.entry.encode())  # type: ignore[arg-type]
            if change.old is not None:
                event.old.CopyFrom(change.old.encode())
            yield state_pb2.WatchResponse(event=[event])


async def _check_id_query(regexp: str, context: Context) -> None:
    try:
        re.compile(regexp)
    except re.error as e:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"failed to compile regexp: {e}")
