"""Infra providers as herder sees them: whether each is connected (its heartbeats are fresh) and ready
(connected, with a usable schema and a config its schema accepts), its JoinConfig, and what deleting it
does.

A provider heartbeats by writing ``status.lastHeartbeat`` every ``status.heartbeatIntervalSeconds``;
three missed beats and it is not ``Connected``. While it has reported one machine on two requests, its
``Conflict`` condition names them (``machine_requests`` refuses the second claim). Deleting an InfraProvider lets its requests go: each is
deleted (herder still takes its machine out of its cluster) and the provider's finalizer is dropped from
it, since a provider that is gone for good will never drop it, and must not hold clusters hostage.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable

from herder.controllers.provisioning import provider_schema
from herder.controllers.provisioning.requests import request_status
from herder.resources import Resource
from herder.resources.access import HIDDEN_LABEL, INFRA_PROVIDER_LABEL
from herder.resources.provisioning import (
    CONFLICT,
    INFRA_PROVIDER,
    JOIN_CONFIG,
    MACHINE_CLAIMED,
    MACHINE_REQUEST,
    PROVIDER_FINALIZER,
    InfraProviderSpec,
    InfraProviderStatus,
    JoinConfigSpec,
)
from herder.resources.status import status_of
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch, controller_owner
from herder.runtime.index import ViewIndex
from herder.runtime.outputs import Owns, Writes
from herder.state.store import WatchEvent
from herder.talos.siderolink.kernel_args import join_args

CLEANUP_FINALIZER = "herder.dev/infra-provider-cleanup"
MISSED_BEATS = 3
DEFAULT_INTERVAL = 10.0


class InfraProviderController(Controller):
    name = "InfraProvider"
    primary = INFRA_PROVIDER.kind
    outputs = (
        Writes(
            INFRA_PROVIDER.kind,
            "status.conditions[Connected]",
            "status.conditions[Ready]",
            f"status.conditions[{CONFLICT}]",
            f"metadata.finalizers[{CLEANUP_FINALIZER}]",
        ),
        Owns(JOIN_CONFIG.kind),
        Writes(MACHINE_REQUEST.kind, f"metadata.finalizers[{PROVIDER_FINALIZER}]", deletes=True),
    )
    concurrency = 2

    def __init__(self, api_url: str = "", siderolink_api: str = "", siderolink_server: str = "") -> None:
        """``siderolink_api``, ``siderolink_server``: where machines join herder and its tunnel address
        (with them, each JoinConfig's kernelArgs make its provider's machines join)."""
        self._api_url = api_url
        self._siderolink = (siderolink_api, siderolink_server) if siderolink_api else None
        # The requests of each provider whose machine another request holds, wherever they are, by name
        # (but hidden ones, which users who read the provider may not know of).
        self._claims = ViewIndex(MACHINE_REQUEST.kind, _refused_claim, _shown_name, namespaced=False)
        self.watches = (
            Watch(INFRA_PROVIDER.kind),
            Watch(JOIN_CONFIG.kind, controller_owner(INFRA_PROVIDER.kind)),
            Watch(MACHINE_REQUEST.kind, self._claim_changed),
        )

    def _claim_changed(self, event: WatchEvent) -> Iterable[ObjectKey]:
        before, after = self._claims.update(event)
        if before == after:
            return ()
        return [ObjectKey(INFRA_PROVIDER.kind, None, p) for p in (before, after) if p is not None]

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        provider = await ctx.get(key)
        if provider is None:
            return None
        if provider.metadata.deletion_timestamp:
            return await self._let_go(ctx, provider)
        provider = await ctx.ensure_finalizer(provider, CLEANUP_FINALIZER)
        await self._join_config(ctx, provider)
        status = status_of(provider, InfraProviderStatus)
        interval = status.heartbeat_interval_seconds or DEFAULT_INTERVAL
        age = ctx.clock.age(status.last_heartbeat) if status.last_heartbeat else None
        stale_in = interval * MISSED_BEATS - age if age is not None else None
        connected = stale_in is not None and stale_in > 0
        if status.last_heartbeat == "":
            connection = "the provider has not connected yet"
        elif connected:
            connection = f"last heartbeat {status.last_heartbeat}"
        else:
            connection = f"no heartbeat since {status.last_heartbeat}"
        problem = self._problem(provider, status) if connected else connection
        claims = sorted(self._claims.views(None, provider.name))
        now = ctx.clock.rfc3339()

        def record(_: Resource, current: InfraProviderStatus) -> None:
            current.set_condition(
                "Connected", connected, "Heartbeat" if connected else "NoHeartbeat", connection, now=now
            )
            current.set_condition(
                "Ready",
                not problem,
                "Ready" if not problem else ("NotConnected" if not connected else "NotUsable"),
                problem or "provisioning machines",
                now=now,
            )
            if claims or current.condition(CONFLICT) is not None:
                current.set_condition(CONFLICT, bool(claims), *_claimed(claims), now=now)

        await ctx.mutate_status(key, InfraProviderStatus, record)
        told = status.condition(CONFLICT)
        if claims and (told is None or told.reason != MACHINE_CLAIMED):
            await ctx.event(provider, "Warning", MACHINE_CLAIMED, _claimed(claims)[1])
        return Result(requeue_after=stale_in + 0.5) if connected and stale_in is not None else None

    @staticmethod
    def _problem(provider: Resource, status: InfraProviderStatus) -> str:
        """What keeps a connected provider from being used, if anything."""
        try:
            provider_schema.validator_of(status.schema_)
            config = INFRA_PROVIDER.spec_of(provider, InfraProviderSpec).config
            if config is not None:
                causes = provider_schema.check(
                    status.config_schema, config, "spec.config", quote_values=False
                )
                if causes:
                    return f"{causes[0].field}: {causes[0].message}"
        except provider_schema.SchemaUnusable as exc:
            return str(exc)
        return ""

    async def _join_config(self, ctx: Context, provider: Resource) -> None:
        current = await ctx.get(ObjectKey(JOIN_CONFIG.kind, None, provider.name))
        token = JOIN_CONFIG.spec_of(current, JoinConfigSpec).token if current is not None else ""
        token = token or secrets.token_urlsafe(32)
        kernel_args = (
            join_args(self._siderolink[0], token, self._siderolink[1]).kernel_args()
            if self._siderolink
            else []
        )
        spec = {"endpoint": self._api_url, "token": token, "kernelArgs": kernel_args}
        if current is not None and current.spec == spec:
            return
        await ctx.apply_output(
            provider,
            Resource.model_validate(
                {
                    "apiVersion": JOIN_CONFIG.api_version,
                    "kind": JOIN_CONFIG.kind,
                    "metadata": {"name": provider.name, "labels": {INFRA_PROVIDER_LABEL: provider.name}},
                    "spec": spec,
                }
            ),
        )

    async def _let_go(self, ctx: Context, provider: Resource) -> Result | None:
        if CLEANUP_FINALIZER not in provider.metadata.finalizers:
            return None
        listed = await ctx.list(
            MACHINE_REQUEST.kind, label_selector=f"{INFRA_PROVIDER_LABEL}={provider.name}"
        )
        for request in listed:
            key = ObjectKey.of(request)
            if not request.metadata.deletion_timestamp:
                await ctx.release(key)  # a set's request by its controller's leave

            def drop(obj: Resource) -> None:
                obj.metadata.finalizers = [f for f in obj.metadata.finalizers if f != PROVIDER_FINALIZER]

            await ctx.mutate(key, drop)
        if listed:
            await ctx.event(
                provider,
                "Normal",
                "RequestsReleased",
                f"{len(listed)} machine request(s) let go of infra provider {provider.name}",
            )
        await ctx.remove_finalizer(provider, CLEANUP_FINALIZER)
        return None


def _refused_claim(request: Resource) -> str | None:
    """The provider of a request whose machine another request holds (None for any other request)."""
    if not request_status(request).condition_true(CONFLICT):
        return None
    return request.metadata.labels.get(INFRA_PROVIDER_LABEL)


def _shown_name(request: Resource) -> str:
    return "" if HIDDEN_LABEL in request.metadata.labels else f"{request.namespace}/{request.name}"


def _claimed(claims: list[str]) -> tuple[str, str]:
    """The reason and message of a provider's ``Conflict`` condition, for its requests in conflict (by
    name, hidden ones as "")."""
    if not claims:
        return "NoConflict", "every machine the provider reported is on one request"
    named = [name for name in claims if name][:3]
    shown = ": " + ", ".join(named) + (", …" if len(claims) > len(named) else "") if named else ""
    return (
        MACHINE_CLAIMED,
        f"{len(claims)} request(s) report a machine that another request holds{shown}",
    )
