"""The emulator's control API: plain HTTP/1.1 with JSON bodies on a loopback address, for tools and tests.

    GET    /healthz                       {"ok": true}
    GET    /summary                       {"machines": N, "clusters": N, "apiCalls": N}: apiCalls counts
                                          every Talos API call (gRPC) its machines have answered
    GET    /clusters                      every cluster: etcd members, their health, quorum, leader, and where
                                          its emulated Kubernetes API is served: each control plane's
                                          https://IP:6443, and whether it serves there now
    GET    /clusters/{cluster}            one of them, by id or name
    GET    /machines                      every machine's summary (uuid, endpoint, node, stage, power, …,
                                          boots, bootID (new at each boot) and configApplies: how many
                                          times its system booted and how many configs it took; with
                                          --bmc: bmc, its BMC's Redfish System URL, media, and boots as
                                          its firmware counts them)
    POST   /machines                      {"count": N, "talos_version": "v1.x.y", "uuid": "…",
                                           "hardware": {"cpus": N, "memory_mib": N, "disk_gib": N}}
                                          → the new machines
    GET    /machines/{machine}            one machine ({machine} = uuid, address, endpoint or hostname)
    DELETE /machines/{machine}            destroy it
    POST   /machines/{machine}/fault      {"fault": "crash|partition|heal|slow-boot|fail-upgrade|fail-install|
                                           vanish"} (vanish destroys it, as a cloud would behind one's back)
    POST   /machines/{machine}/power      {"state": "on|off"}
    POST   /machines/{machine}/logs       {"service": "kubelet", "line": "..."}: a program of the machine
                                          prints a line, as the service writes its lines (a misbehaving
                                          one printing a secret, for a demo or a test of redaction)
    GET    /faults                        the cloud faults armed: {"create": N, …}
    POST   /faults                        {"operation": "create|destroy|power", "times": N}: the next N such
                                          calls fail (0: until cleared), as a cloud's API fails
    DELETE /faults                        clear them

Creating, destroying and powering machines is what an infra provider asks of the emulator as of a
cloud; a cloud fault armed for one of them makes those calls answer 503 with the fault's message.

Errors are ``{"error": "..."}`` with 400 or 404. Every response closes its connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
from typing import Any

from herder.emu.control.emulator import Emulator
from herder.emu.machine.record import Hardware
from herder.emu.options import CLOUD_OPERATIONS, FAULTS

_REASONS = {
    200: "OK",
    201: "Created",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    503: "Service Unavailable",
}
_MAX_BODY = 1 << 20


class HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ControlAPI:
    def __init__(self, emulator: Emulator) -> None:
        self.emulator = emulator
        self._server: asyncio.Server | None = None
        # Cloud faults armed: operation → calls left to fail (0: every call, until cleared).
        self.cloud_faults: dict[str, int] = {}

    async def start(self, host: str, port: int, *, option: str = "--listen") -> str:
        """Listen; returns the base URL. An address in use is an ``OSError`` naming it and ``option``, the
        flag that moves it."""
        try:
            self._server = await asyncio.start_server(self._handle, host, port)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise OSError(
                f"{host}:{port}, where the emulator's control API listens, is in use: free it or move it "
                f"with {option}",
            ) from None
        bound = self._server.sockets[0].getsockname()
        host = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        return f"http://{host}:{bound[1]}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status, body = await self._respond(reader)
        except HTTPError as e:
            status, body = e.status, {"error": str(e)}
        except (asyncio.IncompleteReadError, ConnectionError, ValueError) as e:
            status, body = 400, {"error": f"malformed request: {e}"}
        payload = json.dumps(body).encode()
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
        )
        with contextlib.suppress(ConnectionError):
            writer.write(head.encode() + payload)
            await writer.drain()
        writer.close()

    async def _respond(self, reader: asyncio.StreamReader) -> tuple[int, Any]:
        request_line = (await reader.readline()).decode("latin-1").strip()
        method, _, rest = request_line.partition(" ")
        path = rest.partition(" ")[0].split("?")[0]
        length = 0
        while (line := (await reader.readline()).decode("latin-1").strip()) != "":
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        if length > _MAX_BODY:
            raise HTTPError(400, "request body too large")
        raw = await reader.readexactly(length) if length else b""
        body = json.loads(raw) if raw.strip() else {}
        if not isinstance(body, dict):
            raise HTTPError(400, "the request body must be a JSON object")
        return await self._route(method, [p for p in path.split("/") if p], body)

    async def _route(self, method: str, parts: list[str], body: dict[str, Any]) -> tuple[int, Any]:
        emulator = self.emulator
        if parts == ["healthz"] and method == "GET":
            return 200, {"ok": True}
        if parts == ["summary"] and method == "GET":
            return 200, {
                "machines": len(emulator.machines),
                "clusters": len(emulator.clusters),
                "apiCalls": emulator.api_calls,
            }
        if parts[:1] == ["clusters"] and method == "GET" and len(parts) <= 2:
            clusters = [
                c for c in emulator.clusters.values() if len(parts) == 1 or parts[1] in (c.id, c.name)
            ]
            if len(parts) == 2 and not clusters:
                raise HTTPError(404, f"cluster {parts[1]!r} not found")
            summaries = [emulator.services.summary(c) for c in clusters]
            return 200, summaries if len(parts) == 1 else summaries[0]
        if parts == ["faults"]:
            return self._faults(method, body)
        if parts == ["machines"]:
            if method == "GET":
                return 200, [emulator.summary(m) for m in emulator.machines.values()]
            if method == "POST":
                count = int(body.get("count", 1))
                if not 1 <= count <= 10000:
                    raise HTTPError(400, "count must be between 1 and 10000")
                self._cloud_call("create")
                try:
                    hardware = _hardware(body.get("hardware"))
                    created = [
                        emulator.create_machine(
                            talos_version=body.get("talos_version"), uuid=body.get("uuid"), hardware=hardware
                        )
                        for _ in range(count)
                    ]
                except ValueError as e:
                    raise HTTPError(400, str(e)) from None
                return 201, [emulator.summary(m) for m in created]
            raise HTTPError(405, f"{method} not allowed on /machines")
        if len(parts) < 2 or parts[0] != "machines":
            raise HTTPError(404, "not found")
        machine = emulator.find(parts[1])
        if machine is None:
            raise HTTPError(404, f"machine {parts[1]!r} not found")
        action = parts[2] if len(parts) == 3 else ""
        if len(parts) == 2 and method == "GET":
            return 200, emulator.summary(machine)
        if len(parts) == 2 and method == "DELETE":
            self._cloud_call("destroy")
            await emulator.destroy_machine(machine)
            return 200, {"deleted": machine.uuid}
        if action == "fault" and method == "POST":
            fault = str(body.get("fault", ""))
            if fault not in FAULTS:
                raise HTTPError(400, f"unknown fault {fault!r}: expected one of {', '.join(FAULTS)}")
            summary = emulator.summary(machine)
            if fault == "vanish":
                await emulator.destroy_machine(machine)
                return 200, {**summary, "stage": "GONE"}
            await machine.inject(fault)
            return 200, emulator.summary(machine)
        if action == "logs" and method == "POST":
            service, line = body.get("service"), body.get("line")
            if not isinstance(line, str) or not line or "\n" in line:
                raise HTTPError(400, "line must be one line of text")
            if service not in machine.service_names():
                raise HTTPError(
                    400, f"service {service!r} is not one of {', '.join(machine.service_names())}"
                )
            machine.logs.write(service, line)
            return 200, emulator.summary(machine)
        if action == "power" and method == "POST":
            self._cloud_call("power")
            state = body.get("state")
            if state == "on":
                machine.power_on()
            elif state == "off":
                await machine.power_off()
            else:
                raise HTTPError(400, "state must be on or off")
            return 200, emulator.summary(machine)
        raise HTTPError(404 if method in ("GET", "POST", "DELETE") else 405, "not found")

    def _faults(self, method: str, body: dict[str, Any]) -> tuple[int, Any]:
        if method == "GET":
            return 200, dict(self.cloud_faults)
        if method == "DELETE":
            self.cloud_faults.clear()
            return 200, {}
        if method != "POST":
            raise HTTPError(405, f"{method} not allowed on /faults")
        operation = str(body.get("operation", ""))
        if operation not in CLOUD_OPERATIONS:
            raise HTTPError(
                400, f"unknown operation {operation!r}: expected one of {', '.join(CLOUD_OPERATIONS)}"
            )
        times = body.get("times", 1)
        if not isinstance(times, int) or times < 0:
            raise HTTPError(400, "times must be a count (0: until cleared)")
        self.cloud_faults[operation] = times
        return 200, dict(self.cloud_faults)

    def _cloud_call(self, operation: str) -> None:
        """Fail this call if a cloud fault is armed for its operation."""
        left = self.cloud_faults.get(operation)
        if left is None:
            return
        if left == 1:
            del self.cloud_faults[operation]
        elif left > 1:
            self.cloud_faults[operation] = left - 1
        raise HTTPError(503, f"the cloud refused to {operation} the machine (injected fault)")


def _hardware(raw: Any) -> Hardware | None:
    """The hardware a new machine is asked with (cpus, memory_mib, disk_gib), or the default."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ValueError("hardware must be an object")
    hardware = Hardware()
    cpus, memory, disk = (
        raw.get("cpus", hardware.cpus),
        raw.get("memory_mib", hardware.memory_mib),
        raw.get("disk_gib"),
    )
    for name, value in (("cpus", cpus), ("memory_mib", memory), ("disk_gib", disk)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"hardware.{name} must be a positive integer")
    hardware.cpus, hardware.memory_mib = cpus, memory
    if disk is not None:
        hardware.disks = [{**hardware.disks[0], "size": disk << 30}]
    return hardware
