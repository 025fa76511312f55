"""The emulated BMCs' Redfish service (DMTF DSP0266) as an ASGI application: one service with a System and a
Manager per machine, the System's ``Id`` and ``UUID`` being the machine's SMBIOS UUID.

    /redfish                                              {"v1": "/redfish/v1/"}
    /redfish/v1/  /redfish/v1/odata  /redfish/v1/$metadata the service root and its OData documents (public)
    /redfish/v1/Systems/{uuid}                             PowerState, Boot (PATCH: BootSourceOverrideTarget
                                                           None/Pxe/Cd/Hdd, BootSourceOverrideEnabled
                                                           Disabled/Once/Continuous, If-Match honoured)
    /redfish/v1/Systems/{uuid}/Actions/ComputerSystem.Reset  ResetType On, ForceOff, GracefulShutdown,
                                                           ForceRestart, GracefulRestart
    /redfish/v1/Managers/{uuid}                            the machine's BMC
    /redfish/v1/Managers/{uuid}/VirtualMedia/CD1           the virtual CD: Actions VirtualMedia.InsertMedia
                                                           ({"Image": URL}) and VirtualMedia.EjectMedia
    /redfish/v1/SessionService/Sessions                    POST {UserName, Password} → X-Auth-Token, Location
    /redfish/v1/AccountService                             the one account, and the predefined roles (read-only)

Everything but the service root, its OData documents and logging in needs HTTP basic authentication or a
session's ``X-Auth-Token``. Errors are Redfish errors (``error.@Message.ExtendedInfo`` from the Base
message registry). What the service leaves out: changing accounts (one, set on the command line), events,
tasks, query parameters (``$expand``, ``$filter``… answer 501), Chassis, logs and firmware updates.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid as uuidlib
from collections.abc import Coroutine
from typing import Any, Protocol
from urllib.parse import urlsplit

from herder.emu.bmc.http import (
    ASGI,
    SCHEMAS,
    RedfishError,
    Reply,
    Request,
    Resource,
    call,
    not_allowed,
    not_found,
    serve,
)
from herder.emu.bmc.sessions import SESSION_TIMEOUT, Sessions, unauthenticated
from herder.emu.bmc.state import ENABLED, TARGETS, BmcState

ROOT = "/redfish/v1"
SYSTEMS = f"{ROOT}/Systems"
MANAGERS = f"{ROOT}/Managers"
SESSIONS = f"{ROOT}/SessionService/Sessions"
ACCOUNTS = f"{ROOT}/AccountService"
ROLES = {
    "Administrator": ["Login", "ConfigureManager", "ConfigureUsers", "ConfigureSelf", "ConfigureComponents"],
    "Operator": ["Login", "ConfigureSelf", "ConfigureComponents"],
    "ReadOnly": ["Login", "ConfigureSelf"],
}
"""Redfish's predefined roles and their privileges; the one account is an Administrator."""
RESET_TYPES = ("On", "ForceOff", "GracefulShutdown", "ForceRestart", "GracefulRestart")
PUBLIC = {"/redfish", ROOT, f"{ROOT}/odata", f"{ROOT}/$metadata"}


class ManagedMachine(Protocol):
    """What a BMC knows of its machine and does to it."""

    @property
    def uuid(self) -> str: ...

    @property
    def hostname(self) -> str: ...

    @property
    def powered_on(self) -> bool: ...

    @property
    def hardware(self) -> tuple[str, str, int, int]:
        """Manufacturer, model, CPUs and MiB of memory."""
        ...

    def power_on(self) -> None: ...

    async def power_off(self) -> None:
        """Cut the power."""
        ...

    async def shut_down(self) -> None:
        """Ask the system to shut down (ACPI), returning once it is off."""
        ...


class Bmcs(Protocol):
    """The machines that have a BMC, and each one's state."""

    def machine(self, uuid: str) -> ManagedMachine | None: ...

    def uuids(self) -> list[str]: ...

    def state(self, uuid: str) -> BmcState: ...

    def save(self, uuid: str) -> None: ...


class RedfishService:
    """The Redfish service of the emulated BMCs (``app`` is its ASGI application)."""

    def __init__(self, bmcs: Bmcs, username: str, password: str, service_uuid: str) -> None:
        self.bmcs = bmcs
        self.sessions = Sessions(username, password)
        self.service_uuid = service_uuid
        self._tasks: set[asyncio.Task[None]] = set()

    async def app(self, scope: dict[str, Any], receive: ASGI, send: ASGI) -> None:
        """The ASGI application."""
        await serve(self._respond, scope, receive, send)

    async def _respond(self, request: Request) -> tuple[Reply, Resource | None]:
        path, method = request.path, request.method
        if path == f"{ROOT}/$metadata":
            if method not in ("GET", "HEAD"):
                raise not_allowed(method, path, ("GET", "HEAD"))
            return Reply(200, document=("application/xml;charset=utf-8", METADATA.encode())), Resource(None)
        public = path in PUBLIC or (path in (SESSIONS, f"{SESSIONS}/Members") and method == "POST")
        if not public and self.sessions.authenticate(request.headers) is None:
            raise unauthenticated()
        if any(p.startswith("$") for p in request.query_names):
            raise RedfishError(501, "QueryNotSupported", "Querying is not supported by the implementation.")
        resource = self.resource(path)
        if resource is None:
            raise not_found(path)
        return await call(resource, request), resource

    # --- the resources ---

    def resource(self, path: str) -> Resource | None:
        if path == "/redfish":
            return Resource(lambda: {"v1": f"{ROOT}/"})
        if path == ROOT:
            return Resource(self._root, schema="ServiceRoot.v1_15_0")
        if path == f"{ROOT}/odata":
            return Resource(self._odata)
        if path == SYSTEMS:
            return Resource(
                lambda: _collection(
                    SYSTEMS, "ComputerSystemCollection", "Computer System Collection", self.bmcs.uuids()
                ),
                schema="ComputerSystemCollection",
            )
        if path == MANAGERS:
            return Resource(
                lambda: _collection(MANAGERS, "ManagerCollection", "Manager Collection", self.bmcs.uuids()),
                schema="ManagerCollection",
            )
        if path == f"{ROOT}/SessionService":
            return Resource(self._session_service, schema="SessionService.v1_1_9")
        if path == ACCOUNTS:
            return Resource(self._account_service, schema="AccountService.v1_15_0")
        if path == f"{ACCOUNTS}/Accounts":
            accounts = f"{ACCOUNTS}/Accounts"
            return Resource(
                lambda: _collection(accounts, "ManagerAccountCollection", "Accounts Collection", ["1"]),
                schema="ManagerAccountCollection",
            )
        if path == f"{ACCOUNTS}/Accounts/1":
            return Resource(self._account, schema="ManagerAccount.v1_12_0")
        if path == f"{ACCOUNTS}/Roles":
            roles = f"{ACCOUNTS}/Roles"
            return Resource(
                lambda: _collection(roles, "RoleCollection", "Roles Collection", list(ROLES)),
                schema="RoleCollection",
            )
        if path.startswith(f"{ACCOUNTS}/Roles/") and path.rpartition("/")[2] in ROLES:
            role = path.rpartition("/")[2]
            return Resource(lambda: _role(role), schema="Role.v1_3_1")
        if path in (SESSIONS, f"{SESSIONS}/Members"):
            return Resource(
                lambda: _collection(SESSIONS, "SessionCollection", "Session Collection", self.sessions.ids()),
                post=self._login,
                schema="SessionCollection",
            )
        if path.startswith(SESSIONS + "/"):
            session_id = path[len(SESSIONS) + 1 :]
            if self.sessions.get(session_id) is None:
                return None
            return Resource(
                lambda: self._session(session_id),
                delete=lambda: self._logout(session_id),
                schema="Session.v1_7_1",
            )
        match = re.fullmatch(rf"{SYSTEMS}/([^/]+)(/Actions/ComputerSystem\.Reset)?", path)
        if match and self.bmcs.machine(match.group(1)) is not None:
            uuid = match.group(1)
            if match.group(2):
                return Resource(None, post=lambda body: self._reset(uuid, body))
            return Resource(
                lambda: self._system(uuid),
                patch=lambda body: self._patch_system(uuid, body),
                schema="ComputerSystem.v1_20_0",
            )
        match = re.fullmatch(
            rf"{MANAGERS}/([^/]+)(/VirtualMedia(/CD1(/Actions/VirtualMedia\.(InsertMedia|EjectMedia))?)?)?",
            path,
        )
        if match and self.bmcs.machine(match.group(1)) is not None:
            uuid = match.group(1)
            if match.group(5) == "InsertMedia":
                return Resource(None, post=lambda body: self._insert(uuid, body))
            if match.group(5) == "EjectMedia":
                return Resource(None, post=lambda body: self._eject(uuid))
            if match.group(3):
                return Resource(lambda: self._cd(uuid), schema="VirtualMedia.v1_6_0")
            if match.group(2):
                media = f"{MANAGERS}/{uuid}/VirtualMedia"
                return Resource(
                    lambda: _collection(media, "VirtualMediaCollection", "Virtual Media Collection", ["CD1"]),
                    schema="VirtualMediaCollection",
                )
            return Resource(lambda: self._manager(uuid), schema="Manager.v1_17_0")
        return None

    def _root(self) -> dict[str, Any]:
        return {
            "@odata.id": f"{ROOT}/",
            "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot",
            "Id": "RootService",
            "Name": "herder emulator BMCs",
            "RedfishVersion": "1.15.0",
            "UUID": self.service_uuid,
            "Product": "herder emulator",
            "Vendor": "herder",
            "Systems": {"@odata.id": SYSTEMS},
            "Managers": {"@odata.id": MANAGERS},
            "SessionService": {"@odata.id": f"{ROOT}/SessionService"},
            "AccountService": {"@odata.id": ACCOUNTS},
            "Links": {"Sessions": {"@odata.id": SESSIONS}},
            "ProtocolFeaturesSupported": {
                "ExcerptQuery": False,
                "ExpandQuery": {"ExpandAll": False, "Levels": False, "Links": False, "NoLinks": False},
                "FilterQuery": False,
                "OnlyMemberQuery": False,
                "SelectQuery": False,
            },
        }

    def _odata(self) -> dict[str, Any]:
        singletons = [
            ("Systems", SYSTEMS),
            ("Managers", MANAGERS),
            ("SessionService", f"{ROOT}/SessionService"),
        ]
        return {
            "@odata.context": f"{ROOT}/$metadata",
            "value": [
                {"name": "Service", "kind": "Singleton", "url": f"{ROOT}/"},
                *({"name": n, "kind": "Singleton", "url": u} for n, u in singletons),
            ],
        }

    def _session_service(self) -> dict[str, Any]:
        return {
            "@odata.id": f"{ROOT}/SessionService",
            "@odata.type": "#SessionService.v1_1_9.SessionService",
            "Id": "SessionService",
            "Name": "Session Service",
            "ServiceEnabled": True,
            "SessionTimeout": SESSION_TIMEOUT,
            "Status": {"State": "Enabled", "Health": "OK"},
            "Sessions": {"@odata.id": SESSIONS},
        }

    def _account_service(self) -> dict[str, Any]:
        return {
            "@odata.id": ACCOUNTS,
            "@odata.type": "#AccountService.v1_15_0.AccountService",
            "Id": "AccountService",
            "Name": "Account Service",
            "Description": "One account, set when the emulator starts (--bmc-user, --bmc-password)",
            "ServiceEnabled": True,
            "Status": {"State": "Enabled", "Health": "OK"},
            "Accounts": {"@odata.id": f"{ACCOUNTS}/Accounts"},
            "Roles": {"@odata.id": f"{ACCOUNTS}/Roles"},
        }

    def _account(self) -> dict[str, Any]:
        return {
            "@odata.id": f"{ACCOUNTS}/Accounts/1",
            "@odata.type": "#ManagerAccount.v1_12_0.ManagerAccount",
            "Id": "1",
            "Name": "User Account",
            "UserName": self.sessions.username,
            "RoleId": "Administrator",
            "Enabled": True,
            "Locked": False,
            "Password": None,
            "PasswordChangeRequired": False,
            "AccountTypes": ["Redfish"],
            "Links": {"Role": {"@odata.id": f"{ACCOUNTS}/Roles/Administrator"}},
        }

    def _session(self, session_id: str) -> dict[str, Any]:
        session = self.sessions.get(session_id)
        if session is None:
            raise not_found(f"{SESSIONS}/{session_id}")
        return {
            "@odata.id": f"{SESSIONS}/{session_id}",
            "@odata.type": "#Session.v1_7_1.Session",
            "Id": session_id,
            "Name": "User Session",
            "UserName": session.user,
        }

    async def _login(self, body: dict[str, Any]) -> Reply:
        session, token = self.sessions.log_in(body.get("UserName"), body.get("Password"))
        location = f"{SESSIONS}/{session.id}"
        return Reply(201, self._session(session.id), {"Location": location, "X-Auth-Token": token})

    async def _logout(self, session_id: str) -> Reply:
        self.sessions.log_out(session_id)
        return Reply(204)

    def _machine(self, uuid: str) -> ManagedMachine:
        machine = self.bmcs.machine(uuid)
        if machine is None:
            raise not_found(f"{SYSTEMS}/{uuid}")
        return machine

    def _system(self, uuid: str) -> dict[str, Any]:
        machine, state = self._machine(uuid), self.bmcs.state(uuid)
        manufacturer, model, cpus, memory_mib = machine.hardware
        return {
            "@odata.id": f"{SYSTEMS}/{uuid}",
            "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem",
            "Id": uuid,
            "Name": machine.hostname,
            "SystemType": "Physical",
            "UUID": uuid,
            "Manufacturer": manufacturer,
            "Model": model,
            "PowerState": "On" if machine.powered_on else "Off",
            "Status": {"State": "Enabled", "Health": "OK"},
            "ProcessorSummary": {"Count": cpus},
            "MemorySummary": {"TotalSystemMemoryGiB": round(memory_mib / 1024, 2)},
            "Boot": {
                "BootSourceOverrideTarget": state.override_target,
                "BootSourceOverrideTarget@Redfish.AllowableValues": list(TARGETS),
                "BootSourceOverrideEnabled": state.override_enabled,
                "BootSourceOverrideMode": "UEFI",
            },
            "Actions": {
                "#ComputerSystem.Reset": {
                    "target": f"{SYSTEMS}/{uuid}/Actions/ComputerSystem.Reset",
                    "ResetType@Redfish.AllowableValues": list(RESET_TYPES),
                }
            },
            "Links": {"ManagedBy": [{"@odata.id": f"{MANAGERS}/{uuid}"}]},
        }

    async def _patch_system(self, uuid: str, body: dict[str, Any]) -> Reply:
        self._machine(uuid)
        unknown = sorted(set(body) - {"Boot"})
        if unknown:
            readonly = set(self._system(uuid))
            which = unknown[0]
            if which in readonly:
                raise RedfishError(
                    400,
                    "PropertyNotWritable",
                    f"The property {which} is a read only property and cannot be assigned a value.",
                )
            raise RedfishError(
                400,
                "PropertyUnknown",
                f"The property {which} is not in the list of valid properties for the resource.",
            )
        boot = body.get("Boot")
        if not isinstance(boot, dict) or not boot:
            raise RedfishError(
                400,
                "PropertyValueTypeError",
                "The value for the property Boot is of a different type than the property can accept.",
            )
        allowed = {
            "BootSourceOverrideTarget": TARGETS,
            "BootSourceOverrideEnabled": ENABLED,
            "BootSourceOverrideMode": ("UEFI",),
        }
        for name, value in boot.items():
            if name not in allowed:
                raise RedfishError(
                    400,
                    "PropertyUnknown",
                    f"The property Boot/{name} is not in the list of valid properties for the resource.",
                )
            if value not in allowed[name]:
                raise RedfishError(
                    400,
                    "PropertyValueNotInList",
                    f"The value {json.dumps(value)} for the property Boot/{name} is not in the list of acceptable values.",
                )
        state = self.bmcs.state(uuid)
        state.override_target = boot.get("BootSourceOverrideTarget", state.override_target)
        state.override_enabled = boot.get("BootSourceOverrideEnabled", state.override_enabled)
        self.bmcs.save(uuid)
        return Reply(204)

    async def _reset(self, uuid: str, body: dict[str, Any]) -> Reply:
        machine = self._machine(uuid)
        kind = body.get("ResetType")
        if kind is None:
            raise RedfishError(
                400,
                "ActionParameterMissing",
                "The action ComputerSystem.Reset requires the parameter ResetType to be present in the request body.",
            )
        if kind not in RESET_TYPES:
            raise RedfishError(
                400,
                "ActionParameterValueNotInList",
                f"The value {json.dumps(kind)} for the parameter ResetType in the action ComputerSystem.Reset is not in the list of acceptable values.",
            )
        if kind == "On":
            if not machine.powered_on:
                machine.power_on()
        elif kind == "ForceOff":
            await machine.power_off()
        elif kind == "ForceRestart":
            await machine.power_off()
            machine.power_on()
        elif kind == "GracefulShutdown":
            self._background(machine.shut_down())
        else:  # GracefulRestart: the system shuts down, and the BMC powers it on again

            async def restart() -> None:
                await machine.shut_down()
                machine.power_on()

            self._background(restart())
        return Reply(204)

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        """Carry out a reset that takes the system's time (a shutdown) after answering, as a BMC does."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _manager(self, uuid: str) -> dict[str, Any]:
        machine = self._machine(uuid)
        return {
            "@odata.id": f"{MANAGERS}/{uuid}",
            "@odata.type": "#Manager.v1_17_0.Manager",
            "Id": uuid,
            "Name": f"BMC of {machine.hostname}",
            "ManagerType": "BMC",
            "UUID": str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, uuid)),
            "ServiceEntryPointUUID": self.service_uuid,
            "Manufacturer": "herder",
            "Model": "emulated BMC",
            "FirmwareVersion": "1.0.0",
            "Status": {"State": "Enabled", "Health": "OK"},
            "VirtualMedia": {"@odata.id": f"{MANAGERS}/{uuid}/VirtualMedia"},
            "Links": {"ManagerForServers": [{"@odata.id": f"{SYSTEMS}/{uuid}"}]},
        }

    def _cd(self, uuid: str) -> dict[str, Any]:
        state = self.bmcs.state(uuid)
        path = f"{MANAGERS}/{uuid}/VirtualMedia/CD1"
        return {
            "@odata.id": path,
            "@odata.type": "#VirtualMedia.v1_6_0.VirtualMedia",
            "Id": "CD1",
            "Name": "Virtual CD",
            "MediaTypes": ["CD", "DVD"],
            "Image": state.image or None,
            "ImageName": urlsplit(state.image).path.rpartition("/")[2] if state.image else "",
            "Inserted": state.inserted,
            "WriteProtected": state.write_protected,
            "ConnectedVia": "URI" if state.inserted else "NotConnected",
            "TransferMethod": "Stream",
            "Actions": {
                "#VirtualMedia.InsertMedia": {"target": f"{path}/Actions/VirtualMedia.InsertMedia"},
                "#VirtualMedia.EjectMedia": {"target": f"{path}/Actions/VirtualMedia.EjectMedia"},
            },
        }

    async def _insert(self, uuid: str, body: dict[str, Any]) -> Reply:
        image = body.get("Image")
        if not isinstance(image, str) or not image:
            raise RedfishError(
                400,
                "ActionParameterMissing",
                "The action VirtualMedia.InsertMedia requires the parameter Image to be present in the request body.",
            )
        if urlsplit(image).scheme not in ("http", "https"):
            raise RedfishError(
                400,
                "ActionParameterValueFormatError",
                f"The value {json.dumps(image)} for the parameter Image in the action VirtualMedia.InsertMedia is of a different format than the parameter can accept: an http(s) URL.",
            )
        state = self.bmcs.state(uuid)
        if state.inserted:
            raise RedfishError(409, "ResourceInUse", "The virtual CD holds an image already: eject it first.")
        state.image = image
        state.inserted = bool(body.get("Inserted", True))
        state.write_protected = bool(body.get("WriteProtected", True))
        self.bmcs.save(uuid)
        return Reply(204)

    async def _eject(self, uuid: str) -> Reply:
        state = self.bmcs.state(uuid)
        state.image, state.inserted = "", False
        self.bmcs.save(uuid)
        return Reply(204)


def _role(role: str) -> dict[str, Any]:
    return {
        "@odata.id": f"{ACCOUNTS}/Roles/{role}",
        "@odata.type": "#Role.v1_3_1.Role",
        "Id": role,
        "Name": f"{role} Role",
        "RoleId": role,
        "IsPredefined": True,
        "AssignedPrivileges": ROLES[role],
    }


def _collection(path: str, kind: str, name: str, ids: list[str]) -> dict[str, Any]:
    return {
        "@odata.id": path,
        "@odata.type": f"#{kind}.{kind}",
        "Name": name,
        "Members": [{"@odata.id": f"{path}/{i}"} for i in ids],
        "Members@odata.count": len(ids),
    }


METADATA = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0">\n'
    + "".join(
        f'  <edmx:Reference Uri="{SCHEMAS}/{name}_v1.xml">\n'
        f'    <edmx:Include Namespace="{name}"/>\n'
        + (f'    <edmx:Include Namespace="{name}.{version}"/>\n' if version else "")
        + "  </edmx:Reference>\n"
        for name, version in (
            ("ServiceRoot", "v1_15_0"),
            ("ComputerSystem", "v1_20_0"),
            ("ComputerSystemCollection", ""),
            ("Manager", "v1_17_0"),
            ("ManagerCollection", ""),
            ("VirtualMedia", "v1_6_0"),
            ("VirtualMediaCollection", ""),
            ("SessionService", "v1_1_9"),
            ("Session", "v1_7_1"),
            ("SessionCollection", ""),
            ("Message", "v1_1_1"),
        )
    )
    + "  <edmx:DataServices>\n"
    '    <Schema xmlns="http://docs.oasis-open.org/odata/ns/edm" Namespace="Service">\n'
    '      <EntityContainer Name="Service" Extends="ServiceRoot.v1_15_0.ServiceContainer"/>\n'
    "    </Schema>\n"
    "  </edmx:DataServices>\n"
    "</edmx:Edmx>\n"
)
