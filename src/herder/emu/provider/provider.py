"""The emulator's infra provider, written with herder's provider SDK as any provider is: for each
MachineRequest it creates an emulated machine (provider data: cpus, memoryMiB, diskGiB; the request's
Talos version) through the emulator's control API, as a provider would through a cloud's API, waits for it
to boot into maintenance mode and reports its UUID and endpoint; it destroys the machine when the request
goes, notices one that vanished, and powers machines on, off and reboots them.

A machine's UUID is derived from its request's uid, so that a provider killed between creating a machine
and recording it creates no second one when it runs the step again: the emulator answers that the
machine exists, and it is adopted.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Sequence
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from herder.client import describe
from herder.infra import Provider, RequestContext, Retry, Step

# The namespace of the UUIDs derived from request uids.
_UUIDS = uuidlib.uuid5(uuidlib.NAMESPACE_URL, "https://herder.dev/emulator/machines")


class EmulatedMachine(BaseModel):
    """What a request asks of an emulated machine."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    cpus: int = Field(default=2, ge=1, le=256)
    memory_mib: int = Field(default=4096, alias="memoryMiB", ge=256)
    disk_gib: int = Field(default=20, alias="diskGiB", ge=1)


class EmulatorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    emulator: str = Field(description="the emulator's control API URL (http://127.0.0.1:50080)")


Context = RequestContext[EmulatedMachine, EmulatorConfig]

NETWORK_PATCH = 'machine:\n  sysctls:\n    net.core.somaxconn: "65535"\n'
"""What the emulated cloud sets on its machines (and a test can find in their configs)."""


class EmulatorError(Exception):
    """The emulator refused a call (its message, as a cloud's API error would be shown)."""


class EmulatorProvider(Provider[EmulatedMachine, EmulatorConfig]):
    data_model = EmulatedMachine
    config_model = EmulatorConfig
    display_name = "Talos emulator"
    description = "emulated Talos machines in a herder emulator"
    version = "1.0.0"
    supports_power = True

    def __init__(self) -> None:
        self._http: httpx.AsyncClient | None = None
        self._url = ""

    async def start(self, config: EmulatorConfig) -> None:
        self._url = config.emulator.rstrip("/")
        self._http = httpx.AsyncClient(timeout=30)

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.aclose()

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        assert self._http is not None
        try:
            response = await self._http.request(method, self._url + path, json=body)
        except httpx.HTTPError as exc:
            raise EmulatorError(f"cannot reach the emulator at {self._url}: {describe(exc)}") from None
        data = response.json() if response.content else {}
        return response.status_code, data

    def steps(self) -> Sequence[Step]:
        return [Step("create", self._create), Step("boot", self._boot)]

    @staticmethod
    def _uuid(ctx: Context) -> str:
        return str(ctx.state.get("uuid") or uuidlib.uuid5(_UUIDS, ctx.uid))

    async def _create(self, ctx: Context) -> None:
        # Derived from the request, the UUID need not be kept in the provider's state (a write less).
        uuid = self._uuid(ctx)
        hardware = {"cpus": ctx.data.cpus, "memory_mib": ctx.data.memory_mib, "disk_gib": ctx.data.disk_gib}
        code, body = await self._call(
            "POST", "/machines", {"uuid": uuid, "talos_version": ctx.talos_version, "hardware": hardware}
        )
        adopted = code == 400 and "already exists" in str(body.get("error", ""))  # by an earlier run
        if code >= 400 and not adopted:
            raise EmulatorError(str(body.get("error") or f"the emulator answered {code}"))
        # Its network tuning, as a cloud provider sets up its machines' network: a config patch of the
        # request, which herder makes a machine patch of the machine.
        await ctx.create_config_patch(
            f"net-{ctx.name}", NETWORK_PATCH, description="the emulated cloud's network tuning"
        )

    async def _boot(self, ctx: Context) -> None:
        uuid = self._uuid(ctx)
        code, body = await self._call("GET", f"/machines/{uuid}")
        if code == 404:
            raise EmulatorError(f"machine {uuid} is gone from the emulator")
        if code >= 400:
            raise EmulatorError(str(body.get("error") or f"the emulator answered {code}"))
        if body.get("stage") != "MAINTENANCE":
            raise Retry(f"machine {uuid} is booting ({body.get('stage', '').lower()})", after=0.2)
        ctx.set_machine(uuid, str(body["endpoint"]))

    async def deprovision(self, ctx: Context) -> None:
        # Perhaps made by a step that had not reported yet: its UUID is known all the same.
        code, body = await self._call("DELETE", f"/machines/{ctx.machine_uuid or self._uuid(ctx)}")
        if code >= 400 and code != 404:
            raise EmulatorError(str(body.get("error") or f"the emulator answered {code}"))

    async def exists(self, ctx: Context) -> bool:
        code, _ = await self._call("GET", f"/machines/{self._uuid(ctx)}")
        if code >= 500:
            raise EmulatorError(f"the emulator answered {code}")
        return code != 404

    async def power(self, ctx: Context, on: bool) -> None:
        code, body = await self._call(
            "POST", f"/machines/{self._uuid(ctx)}/power", {"state": "on" if on else "off"}
        )
        if code >= 400:
            raise EmulatorError(str(body.get("error") or f"the emulator answered {code}"))

    async def reboot(self, ctx: Context) -> None:
        await self.power(ctx, False)
        await self.power(ctx, True)
