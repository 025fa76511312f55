"""The emulator as a child process (``herder emu run``), for benchmarks and tests: started, found through the
files it writes in its data directory, and stopped by its own pid."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from herder.emu.control.store import read_info

_ENTRY = "from herder.cli.main import main; main()"


@dataclass
class EmulatorProcess:
    data_dir: Path
    machines: int
    machine_cidr: str
    machine_port: int = 50000
    extra_args: list[str] = field(default_factory=list)
    listen: str = "127.0.0.1:0"
    """Where its control API listens."""
    prefix: list[str] = field(default_factory=list)
    """What runs it (``ip netns exec NAME``: in a network namespace)."""
    process: subprocess.Popen[bytes] | None = None
    control_url: str = ""

    def start(self) -> None:
        args = [
            *self.prefix,
            sys.executable,
            "-c",
            _ENTRY,
            "emu",
            "run",
            "--data-dir",
            str(self.data_dir),
            "--machines",
            str(self.machines),
            "--listen",
            self.listen,
            "--machine-cidr",
            self.machine_cidr,
            "--machine-port",
            str(self.machine_port),
            *self.extra_args,
        ]
        # A previous run's files must not be mistaken for this one's.
        (self.data_dir / "emulator.json").unlink(missing_ok=True)
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    async def wait_ready(self, timeout: float = 60.0) -> str:
        """Wait until the control API answers; returns its URL."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"the emulator exited with code {self.process.returncode}")
            try:
                info = read_info(self.data_dir)
                if info.get("pid") == self.pid:
                    self.control_url = str(info["control"])
                    return self.control_url
            except (OSError, ValueError, KeyError):
                pass
            await asyncio.sleep(0.05)
        raise TimeoutError("the emulator did not start in time")

    def published(self) -> list[dict[str, str]]:
        """``machines.json``: uuid, endpoint and node of every machine."""
        data: list[dict[str, str]] = json.loads((self.data_dir / "machines.json").read_text())
        return data

    async def control(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        async with httpx.AsyncClient(timeout=30) as client:
            response = await client.request(method, self.control_url + path, json=body)
            response.raise_for_status()
            return response.json()

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def cpu_seconds(self) -> float:
        """User and system CPU time the emulator has used so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time; only this process is signalled."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()

    def kill(self) -> None:
        """SIGKILL: the emulator dies without cleaning up (what it persisted must survive)."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
