"""The gateway's gRPC handler: every call of the machine and resource APIs is checked, relayed to the nodes
it names and recorded, with raw messages, as apid routes calls:

- ``node`` metadata (one value): one-to-one. The node's replies and its status go back unchanged.
- ``nodes`` metadata (machine API only): one-to-many. The request goes to each node at once; each reply
  message is marked with the node's name as the caller gave it, and a node that failed or was refused
  answers a message holding only that error (``replies``), so the call itself succeeds. A streaming
  call merges the nodes' streams as their messages come.
- neither: refused, as herder has no machine of its own to answer.

Before anything is relayed the caller must be someone (``callers``), and its Talos role must allow the
method by Talos's table; the nodes are then looked up (``targets``). Only the metadata keys apid
forwards (``context``, ``runtime``) reach the machines.

Every handler is registered as a stream in both directions: on the wire that is every gRPC call, so one
relay carries unary and streaming calls alike, and the messages are never decoded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from herder.state.store import Store
from herder.talos.machine import roles
from herder.talos.machine.tunnel import TLSPeer
from herder.talos_gateway import methods, replies
from herder.talos_gateway.authority import ForeignCertificate, read_client_certificate
from herder.talos_gateway.callers import Caller, Callers, Refused
from herder.talos_gateway.methods import METHODS, Method
from herder.talos_gateway.targets import Target, find
from herder.talos_gateway.trail import CallTrail
from herder.talos_gateway.upstreams import Upstreams

log = logging.getLogger(__name__)

FORWARDED = frozenset({"context", "runtime"})
"""The only metadata apid passes on to the machines it proxies to."""

Context = Any  # grpc.aio.ServicerContext (grpc ships no type information)
_Metadata = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class _Call:
    method: Method
    context: Context
    forwarded: _Metadata
    source: str
    user_agent: str

    def timeout(self) -> float | None:
        remaining = self.context.time_remaining()
        return None if remaining is None else max(remaining, 0.0)


class Relay:
    def __init__(
        self,
        store: Store,
        callers: Callers,
        upstreams: Upstreams,
        trail: CallTrail,
        peers: Mapping[str, TLSPeer],
    ) -> None:
        """``peers``: who is behind each connection of the gateway's TLS front (``server``), by the peer
        name gRPC gives the relayed connection."""
        self._store = store
        self._peers = peers
        self._callers = callers
        self._upstreams = upstreams
        self._trail = trail
        self._recording: set[asyncio.Task[None]] = set()

    def handlers(self) -> list[Any]:
        """The gRPC handlers of every method relayed, one generic handler per service, and last one for
        every other method: it is answered UNIMPLEMENTED as a Talos machine answers a method it does not
        have, and recorded in the audit trail as every call is."""
        services: dict[str, dict[str, Any]] = {}
        for method in METHODS.values():
            services.setdefault(method.service, {})[method.name] = grpc.stream_stream_rpc_method_handler(
                self._handler(method)
            )
        generic = [grpc.method_handlers_generic_handler(name, h) for name, h in services.items()]
        return [*generic, _Unknown(self._unknown)]

    def _handler(self, method: Method) -> Callable[[AsyncIterator[bytes], Context], AsyncIterator[bytes]]:
        async def handle(requests: AsyncIterator[bytes], context: Context) -> AsyncIterator[bytes]:
            async for reply in self._relay(method, requests, context):
                yield reply

        return handle

    async def drain(self) -> None:
        """Wait for the audit events still being written."""
        await asyncio.gather(*self._recording, return_exceptions=True)

    def _record(
        self, call: _Call, caller: Caller | None, target: Target | None, code: grpc.StatusCode, outcome: str
    ) -> None:
        """Record in the audit trail without waiting: a call that ends by cancellation is recorded too."""
        coroutine = self._trail.record(
            caller.identity if caller is not None else None,
            call.method,
            target,
            namespace=caller.bound.namespace if caller is not None else "",
            source=call.source,
            user_agent=call.user_agent,
            code=code,
            outcome=outcome,
        )
        task = asyncio.get_running_loop().create_task(coroutine)
        self._recording.add(task)
        task.add_done_callback(self._recording.discard)

    def _call(self, method: Method, context: Context) -> _Call:
        metadata: _Metadata = tuple((k, str(v)) for k, v in context.invocation_metadata() or ())
        peer = self._peers.get(context.peer())
        return _Call(
            method,
            context,
            forwarded=tuple((k, v) for k, v in metadata if k in FORWARDED),
            source=peer.address if peer is not None else "",
            user_agent=next((v for k, v in metadata if k == "user-agent"), ""),
        )

    async def _caller(self, context: Context) -> Caller:
        """Who calls, by the certificate the TLS front verified; ``Refused`` if it binds no one."""
        peer = self._peers.get(context.peer())
        if peer is None:
            # Not through the TLS front (its connection is gone, or someone dialled the inner port).
            raise Refused(grpc.StatusCode.UNAUTHENTICATED, "the call came through no verified connection")
        try:
            presented = read_client_certificate(peer.certificate)
        except ForeignCertificate as e:
            raise Refused(grpc.StatusCode.UNAUTHENTICATED, str(e)) from None
        return await self._callers.of(presented)

    async def _unknown(self, method: Method, _requests: AsyncIterator[bytes], context: Context) -> None:
        call = self._call(method, context)
        caller: Caller | None = None
        try:
            caller = await self._caller(context)
            if methods.known(method):
                raise Refused(grpc.StatusCode.PERMISSION_DENIED, methods.refusal(method))
            raise Refused(grpc.StatusCode.UNIMPLEMENTED, _unknown_method(method))
        except Refused as e:
            self._record(call, caller, None, e.code, e.message)
            await context.abort(e.code, e.message)

    async def _relay(
        self, method: Method, requests: AsyncIterator[bytes], context: Context
    ) -> AsyncIterator[bytes]:
        metadata: _Metadata = tuple((k, str(v)) for k, v in context.invocation_metadata() or ())
        call = self._call(method, context)
        caller: Caller | None = None
        try:
            caller = await self._caller(context)
            if not methods.let_through(method):
                raise Refused(grpc.StatusCode.PERMISSION_DENIED, methods.refusal(method))
            allowed = caller.may_call(method.path)
            try:
                nodes, many = _nodes(method, metadata)
            except Refused:
                # As apid, the role is checked before the metadata is read.
                if not allowed:
                    raise _not_authorized() from None
                raise
            if many and method.client_streaming and len(nodes) > 1:
                raise Refused(
                    grpc.StatusCode.INVALID_ARGUMENT, f"{method.path} streams requests to one node at a time"
                )
        except Refused as e:
            self._record(call, caller, None, e.code, e.message)
            await context.abort(e.code, e.message)
            return
        targets = await find(self._store, caller, nodes)
        if not allowed:
            # The whole call is refused; the trail says which machines it was meant for.
            refused = _not_authorized()
            for target in targets:
                self._record(call, caller, target, refused.code, refused.message)
            await context.abort(refused.code, refused.message)
            return
        if not many:
            async for reply in self._one(call, caller, targets[0], requests):
                yield reply
        elif method.server_streaming:
            async for reply in self._many_streams(call, caller, targets, [r async for r in requests]):
                yield reply
        else:
            yield await self._many_replies(call, caller, targets, [r async for r in requests])

    @contextlib.contextmanager
    def _trailed(self, call: _Call, caller: Caller, target: Target) -> Iterator[None]:
        """Record how the call to one node ended; any failure leaves as ``Refused``."""
        code, outcome = grpc.StatusCode.OK, ""
        try:
            yield
        except Refused as e:
            code, outcome = e.code, e.message
            raise
        except asyncio.CancelledError:
            code, outcome = _ended(call.method)
            raise
        except Exception as e:
            log.exception("relaying %s to %s failed", call.method.path, target.node)
            code, outcome = grpc.StatusCode.INTERNAL, f"the gateway failed: {e}"
            raise Refused(code, outcome) from e
        finally:
            self._record(call, caller, target, code, outcome)

    async def _one(
        self, call: _Call, caller: Caller, target: Target, requests: AsyncIterator[bytes]
    ) -> AsyncIterator[bytes]:
        try:
            with self._trailed(call, caller, target):
                async for reply in self._leg(call, caller, target, requests):
                    yield reply
        except Refused as e:
            await call.context.abort(e.code, e.message)

    async def _leg(
        self, call: _Call, caller: Caller, target: Target, requests: AsyncIterator[bytes] | Iterable[bytes]
    ) -> AsyncIterator[bytes]:
        """The replies of one node, or ``Refused`` with the status the call to it ended with."""
        if target.refused is not None:
            raise target.refused
        # A node was found: in the caller's cluster.
        assert target.machine is not None and caller.cluster is not None
        async with self._upstreams.client(caller.cluster, target.machine, caller.talos_role) as client:
            channel = await client.channel()
            stream = channel.stream_stream(call.method.path)(
                requests, metadata=call.forwarded, timeout=call.timeout()
            )
            try:
                async for reply in stream:
                    yield reply
            except grpc.aio.AioRpcError as e:
                error = client.explain(e)
                raise Refused(grpc.StatusCode[error.code], error.message) from None
            finally:
                stream.cancel()

    async def _many_replies(
        self, call: _Call, caller: Caller, targets: list[Target], requests: list[bytes]
    ) -> bytes:
        async def reply_of(target: Target) -> bytes:
            try:
                with self._trailed(call, caller, target):
                    got = [r async for r in self._leg(call, caller, target, requests)]
                    try:
                        return b"".join(replies.with_hostname(r, target.node, streaming=False) for r in got)
                    except replies.MalformedReply as e:
                        raise Refused(
                            grpc.StatusCode.INTERNAL, f"malformed reply from the node: {e}"
                        ) from None
            except Refused as e:
                return replies.failure(target.node, e.code, e.message, streaming=False)

        return b"".join(await asyncio.gather(*(reply_of(t) for t in targets)))

    async def _many_streams(
        self, call: _Call, caller: Caller, targets: list[Target], requests: list[bytes]
    ) -> AsyncIterator[bytes]:
        merged: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=64)

        async def stream_of(target: Target) -> None:
            try:
                with self._trailed(call, caller, target):
                    async for reply in self._leg(call, caller, target, requests):
                        await merged.put(replies.with_hostname(reply, target.node, streaming=True))
            except Refused as e:
                await merged.put(replies.failure(target.node, e.code, e.message, streaming=True))
            # Every leg ends so, unless it is cancelled (with the call, which then waits for none).
            await merged.put(None)

        legs = [asyncio.create_task(stream_of(t)) for t in targets]
        try:
            ended = 0
            while ended < len(legs):
                reply = await merged.get()
                if reply is None:
                    ended += 1
                else:
                    yield reply
        finally:
            for leg in legs:
                leg.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*legs, return_exceptions=True)


class _Unknown:
    """A generic gRPC handler of every method no other handler has, handed to ``answer`` (which refuses
    it)."""

    def __init__(self, answer: Callable[[Method, AsyncIterator[bytes], Context], Awaitable[None]]) -> None:
        self._answer = answer

    def service(self, handler_call_details: Any) -> Any:
        path = str(handler_call_details.method)
        service, _, name = path.lstrip("/").partition("/")
        method = Method(service, path, name, False, False, False)

        async def handle(requests: AsyncIterator[bytes], context: Context) -> None:
            await self._answer(method, requests, context)

        return grpc.stream_stream_rpc_method_handler(handle)


def _unknown_method(method: Method) -> str:
    """What a Talos machine (grpc-go) answers for a method it does not have."""
    if method.service in {m.service for m in METHODS.values()}:
        return f"unknown method {method.name} for service {method.service}"
    return f"unknown service {method.service}"


def _not_authorized() -> Refused:
    return Refused(grpc.StatusCode.PERMISSION_DENIED, roles.NOT_AUTHORIZED)


def _nodes(method: Method, metadata: _Metadata) -> tuple[list[str], bool]:
    """The nodes a call names and whether it is one-to-many, as apid's director reads its metadata."""
    node = [v for k, v in metadata if k == "node"]
    nodes = [n.strip() for k, v in metadata if k == "nodes" for n in v.split(",") if n.strip()]
    if len(node) > 1:
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "node metadata must be single-valued")
    if nodes:
        if not method.one_to_many:
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"one-2-many proxying is not supported for method {method.path}",
            )
        return nodes, True
    if node and node[0].strip():
        return [node[0].strip()], False
    raise Refused(
        grpc.StatusCode.INVALID_ARGUMENT,
        "no node to call: name a machine of the cluster with -n NODE (its IP address or hostname)",
    )


def _ended(method: Method) -> tuple[grpc.StatusCode, str]:
    """The outcome of a call the caller ended: a stream ends so, any other call was abandoned."""
    if method.server_streaming:
        return grpc.StatusCode.OK, "streamed until the caller ended the call"
    return grpc.StatusCode.CANCELLED, "the caller ended the call"
