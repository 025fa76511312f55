"""One BMC as the Redfish provider drives it, through OpenStack's ``sushy`` client: its System's power,
boot override and UUID, and its virtual media (the System's own, or its Managers').

sushy is synchronous: every call runs in a thread, one at a time per BMC (a BMC answers one client
slowly; sessions are few), over one session kept per BMC. Every failure is a ``BMCError`` naming the BMC
and the Redfish error, with the password scrubbed from it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import sushy
from sushy import exceptions

from herder.providers.redfish.config import BMCConfig

T = TypeVar("T")

OFF_STATES = ("Off",)
ON_STATES = ("On", "PoweringOn")
CD_MEDIA = ("CD", "DVD")


class BMCError(Exception):
    """A BMC refused, failed or could not be reached: its name, address and the Redfish error."""

    def __init__(self, bmc: BMCConfig, message: str) -> None:
        text = f"BMC {bmc.name} ({bmc.address}): {message}"
        password = bmc.password.get_secret_value()
        super().__init__(text.replace(password, "***") if password else text)


class SystemGone(BMCError):
    """The BMC answers, but the System it should manage is not there."""


class BMC:
    """A BMC's System: opened on first use, its session kept until the settings change or ``close``."""

    def __init__(self, config: BMCConfig, timeout: float = 15.0) -> None:
        self.config = config
        self._timeout = timeout
        self._root: Any = None
        self._lock = asyncio.Lock()
        self._thread_lock = threading.Lock()

    async def call(self, what: Callable[[Any], T]) -> T:
        """``what(system)`` in a thread, with the System fresh from the BMC."""
        async with self._lock:
            return await asyncio.to_thread(self._locked, what)

    def _locked(self, what: Callable[[Any], T]) -> T:
        with self._thread_lock:
            try:
                return what(self._system())
            except exceptions.ResourceNotFoundError as exc:
                raise SystemGone(self.config, f"no such System: {exc.message}") from None
            except exceptions.AccessError as exc:
                self._root = None  # a session the BMC dropped: the next call logs in again
                raise BMCError(
                    self.config, f"refused the credentials of {self.config.username!r}: {exc.message}"
                ) from None
            except exceptions.ConnectionError as exc:
                self._root = None
                raise BMCError(self.config, f"cannot be reached: {exc.message}") from None
            except exceptions.SushyError as exc:
                raise BMCError(self.config, str(exc.message or exc) or type(exc).__name__) from None

    def _system(self) -> Any:
        config = self.config
        if self._root is None:
            verify: bool | str = (config.ca_file or True) if config.verify_tls else False
            self._root = sushy.Sushy(
                config.service,
                username=config.username,
                password=config.password.get_secret_value(),
                verify=verify,
                read_timeout=self._timeout,
                connect_timeout=self._timeout,
                server_side_retries=1,
                server_side_retries_delay=1,
            )
        if config.system_path:
            return self._root.get_system(config.system_path)
        members = self._root.get_system_collection().members_identities
        if len(members) != 1:
            raise exceptions.SushyError(
                message=f"the service manages {len(members)} Systems: name one in the BMC's address "
                f"(https://HOST:PORT/redfish/v1/Systems/ID)"
            )
        return self._root.get_system(members[0])

    def close(self) -> None:
        with self._thread_lock:
            root, self._root = self._root, None
        if root is not None:
            del root  # sushy ends its session when the root goes


# --- what the provider does with a System (each runs in the BMC's thread) ---


def uuid_of(system: Any) -> str:
    return str(system.uuid or "").lower()


def power_state(system: Any) -> str:
    state = system.power_state
    return str(state.value if state is not None else "")


def reset(kind: str) -> Callable[[Any], None]:
    """``ComputerSystem.Reset`` with ``kind`` (On, ForceOff, GracefulShutdown, ForceRestart, …)."""

    def act(system: Any) -> None:
        system.reset_system(sushy.ResetType(kind))

    return act


def allows(kind: str) -> Callable[[Any], bool]:
    """Whether the System lists ``kind`` among its reset types."""

    def check(system: Any) -> bool:
        return sushy.ResetType(kind) in system.get_allowed_reset_system_values()

    return check


def _cd_drives(system: Any) -> list[Any]:
    """The virtual CD and DVD drives of the System: its own, else its Managers'."""
    collections = []
    try:
        collections.append(system.virtual_media)
    except exceptions.MissingAttributeError:
        for manager in system.managers:
            try:
                collections.append(manager.virtual_media)
            except exceptions.MissingAttributeError:
                continue
    drives = [drive for collection in collections for drive in collection.get_members()]
    return [d for d in drives if any(t.value in CD_MEDIA for t in d.media_types or ())]


def eject_all(system: Any) -> None:
    for drive in _cd_drives(system):
        if drive.inserted or drive.image:
            drive.eject_media()


def insert_cd(image: str) -> Callable[[Any], None]:
    """Eject whatever the virtual CD holds, insert ``image`` and boot from it once."""

    def act(system: Any) -> None:
        drives = _cd_drives(system)
        if not drives:
            raise exceptions.SushyError(
                message="it has no virtual media: no virtual CD or DVD drive to boot from"
            )
        eject_all(system)
        drives[0].insert_media(image, inserted=True, write_protected=True)
        system.set_system_boot_options(
            target=sushy.BootSource.CD, enabled=sushy.BootSourceOverrideEnabled.ONCE
        )

    return act


def inserted_image(system: Any) -> str:
    """The image in the System's first virtual CD drive, or empty."""
    drives = _cd_drives(system)
    return str(drives[0].image or "") if drives and drives[0].inserted else ""


def boot_override(system: Any) -> tuple[str, str]:
    """The boot override as the BMC shows it: (target, enabled)."""
    boot = system.boot
    target = boot.target.value if boot is not None and boot.target is not None else ""
    enabled = boot.enabled.value if boot is not None and boot.enabled is not None else ""
    return str(target), str(enabled)


def release(system: Any) -> None:
    """Power off, eject the media and boot normally again: the System is free."""
    if power_state(system) not in OFF_STATES:
        system.reset_system(sushy.ResetType.FORCE_OFF)
    eject_all(system)
    # The override off, and the disk as its target where offered (some BMCs take no override without one).
    disk = (
        sushy.BootSource.HDD
        if sushy.BootSource.HDD in system.get_allowed_system_boot_source_values()
        else None
    )
    system.set_system_boot_options(target=disk, enabled=sushy.BootSourceOverrideEnabled.DISABLED)
