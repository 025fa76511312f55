"""A server the tests start as a child process (its output in a log), waited for until it answers, and
ended by its PID (SIGTERM, then SIGKILL if it lingers), even when a test fails."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx


class Child:
    """A child process with its output in a log, ended by its PID."""

    def __init__(self, args: list[str], log: Path, cwd: Path | None = None) -> None:
        self.args, self.log, self.cwd = args, log, cwd
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, ready: str, verify: Any = True) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT, cwd=self.cwd)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(ready, timeout=1, verify=verify)
                return
            time.sleep(0.1)
        self.stop()
        raise AssertionError(f"{self.args[0]} did not start: {self.log.read_text()}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()
