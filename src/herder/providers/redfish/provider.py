"""The Redfish bare-metal provider: a static pool of BMCs, each managing one server; a request takes a free
one and boots it from the Image Factory ISO of its schematic and Talos version over virtual media.

Steps, each safe to run again after a crash:

- ``claim``: the first BMC of the pool that no other request of this provider holds (what each request
  holds is on its status, ``providerState.bmc``); none free: wait.
- ``media``: the System powered off first (so that ``power`` can tell whether it booted already), its
  virtual CD emptied and given ``IMAGE_FACTORY/image/<schematic>/<version>/metal-amd64.iso``, and a
  one-time boot override to the CD.
- ``power``: power on, unless it is on already (a provider killed after powering it on does not boot it a
  second time).
- ``identify``: the machine is reported by its System's UUID (the SMBIOS UUID Talos reports); with the
  BMC's ``machineAddress``, once Talos answers there in maintenance mode with that UUID.

Releasing powers the System off, ejects the media and frees it. ``exists`` is: the BMC answers and the
System is there. Power: On, GracefulShutdown (ForceOff after a while, or when not offered), and a reboot
(GracefulRestart, else ForceRestart) for each ``rebootRequestID``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence

from herder.infra import Fail, Provider, RequestContext, Retry, Step
from herder.providers.maintenance import maintenance_uuid
from herder.providers.redfish import bmc as rf
from herder.providers.redfish.bmc import BMC, BMCError, SystemGone
from herder.providers.redfish.config import BMCConfig, RedfishConfig, RedfishMachine
from herder.resources.access import INFRA_PROVIDER_LABEL
from herder.resources.provisioning import MACHINE_REQUEST

Context = RequestContext[RedfishMachine, RedfishConfig]

SHUTDOWN_SECONDS = 60.0
"""How long a graceful shutdown may take before the System is forced off."""


class RedfishProvider(Provider[RedfishMachine, RedfishConfig]):
    data_model = RedfishMachine
    config_model = RedfishConfig
    display_name = "Bare metal (Redfish)"
    description = "servers of a static pool of BMCs, booted from the Image Factory's ISO over virtual media"
    version = "1.0.0"
    supports_power = True

    def __init__(self) -> None:
        self._bmcs: dict[str, BMC] = {}
        self._claims: dict[str, str] = {}
        """BMC name → the uid of the request that claimed it in this process (not yet on its status)."""
        self._claiming = asyncio.Lock()

    async def stop(self) -> None:
        for bmc in self._bmcs.values():
            bmc.close()

    def _bmc(self, config: BMCConfig) -> BMC:
        """The BMC of these settings (a new session when they changed)."""
        known = self._bmcs.get(config.name)
        if known is None or known.config != config:
            if known is not None:
                known.close()
            known = self._bmcs[config.name] = BMC(config)
        return known

    def _held(self, ctx: Context) -> BMCConfig:
        """The BMC the request claimed."""
        name = str(ctx.state.get("bmc") or "")
        config = ctx.config.bmc(name)
        if config is None:
            raise Fail(f"BMC {name} is no longer in the provider's config", reason="MachineGone")
        return config

    def steps(self) -> Sequence[Step]:
        return [
            Step("claim", self._claim),
            Step("media", self._media),
            Step("power", self._power_on),
            Step("identify", self._identify),
        ]

    # --- the pool ---

    async def _claim(self, ctx: Context) -> None:
        async with self._claiming:
            if ctx.state.get("bmc"):
                self._claims[str(ctx.state["bmc"])] = ctx.uid
                return
            taken = await self._taken(ctx)
            free = [b for b in ctx.config.bmcs if b.name not in taken]
            if not free:
                raise Retry(
                    f"all {len(ctx.config.bmcs)} BMCs of the pool are in use: waiting for one", after=10.0
                )
            ctx.state["bmc"] = free[0].name
            self._claims[free[0].name] = ctx.uid

    async def _taken(self, ctx: Context) -> set[str]:
        """The BMCs other requests of this provider hold: on their status, or claimed here meanwhile."""
        listed = await ctx.client.list(
            MACHINE_REQUEST.plural, None, label_selector=f"{INFRA_PROVIDER_LABEL}={ctx.provider_id}"
        )
        held = {
            str(((r.status or {}).get("providerState") or {}).get("bmc") or "")
            for r in listed.items
            if r.metadata.uid != ctx.uid
        }
        live = {r.metadata.uid for r in listed.items}
        # A claim made here whose request is gone (deleted before its status was written) is free again.
        for name, uid in list(self._claims.items()):
            if uid not in live:
                del self._claims[name]
        return {n for n in held if n} | {n for n, uid in self._claims.items() if uid != ctx.uid}

    # --- provisioning ---

    def image_url(self, ctx: Context) -> str:
        base = ctx.config.image_factory.rstrip("/")
        return f"{base}/image/{ctx.schematic_id}/{ctx.talos_version}/metal-amd64.iso"

    async def _media(self, ctx: Context) -> None:
        bmc = self._bmc(self._held(ctx))
        if await bmc.call(rf.power_state) not in rf.OFF_STATES:
            # Asked once: a BMC that takes its time to power off is not asked again (some start over).
            if not ctx.state.get("poweringOff"):
                await bmc.call(rf.reset("ForceOff"))
                ctx.state["poweringOff"] = True
            raise Retry(f"BMC {bmc.config.name}: powering the System off before it boots the ISO", after=1.0)
        ctx.state.pop("poweringOff", None)
        image = self.image_url(ctx)
        await bmc.call(rf.insert_cd(image))
        ctx.state["image"] = image

    async def _power_on(self, ctx: Context) -> None:
        bmc = self._bmc(self._held(ctx))
        if await bmc.call(rf.power_state) in rf.OFF_STATES:
            await bmc.call(rf.reset("On"))

    async def _identify(self, ctx: Context) -> None:
        config = self._held(ctx)
        uuid = await self._bmc(config).call(rf.uuid_of)
        if not uuid:
            raise BMCError(config, "its System reports no UUID")
        ctx.state["uuid"] = uuid
        if not config.machine_address:
            ctx.set_machine(uuid)
            return
        answered = await maintenance_uuid(
            config.machine_address, waiting_for=f"BMC {config.name}: the System boots Talos from the ISO"
        )
        if answered != uuid:
            raise BMCError(
                config,
                f"the machine at {config.machine_address} reports UUID {answered}, not the System's {uuid}: "
                "machineAddress names another machine",
            )
        ctx.set_machine(uuid, config.machine_address)

    # --- the rest of the machine's life ---

    async def deprovision(self, ctx: Context) -> None:
        name = str(ctx.state.get("bmc") or "")
        config = ctx.config.bmc(name) if name else None
        if config is not None:
            with contextlib.suppress(SystemGone):  # nothing left to power off
                await self._bmc(config).call(rf.release)
        for claimed, uid in list(self._claims.items()):
            if uid == ctx.uid:
                del self._claims[claimed]

    async def exists(self, ctx: Context) -> bool:
        name = str(ctx.state.get("bmc") or "")
        config = ctx.config.bmc(name)
        if config is None:
            return False
        try:
            uuid = await self._bmc(config).call(rf.uuid_of)
        except SystemGone:
            return False
        return not ctx.state.get("uuid") or uuid == ctx.state["uuid"]

    async def power(self, ctx: Context, on: bool) -> None:
        bmc = self._bmc(self._held(ctx))
        if on:
            if await bmc.call(rf.power_state) in rf.OFF_STATES:
                await bmc.call(rf.reset("On"))
            return
        if await bmc.call(rf.power_state) in rf.OFF_STATES:
            return
        if await bmc.call(rf.allows("GracefulShutdown")):
            await bmc.call(rf.reset("GracefulShutdown"))
            deadline = time.monotonic() + SHUTDOWN_SECONDS
            while time.monotonic() < deadline:
                if await bmc.call(rf.power_state) in rf.OFF_STATES:
                    return
                await asyncio.sleep(1.0)
        await bmc.call(rf.reset("ForceOff"))

    async def reboot(self, ctx: Context) -> None:
        bmc = self._bmc(self._held(ctx))
        graceful = await bmc.call(rf.allows("GracefulRestart"))
        await bmc.call(rf.reset("GracefulRestart" if graceful else "ForceRestart"))
