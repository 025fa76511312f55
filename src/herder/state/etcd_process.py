"""Throwaway etcd members on free loopback ports, for tests, benchmarks and demos.

``EtcdCluster`` runs Debian's ``etcd`` binary as child processes with fast raft timings, waits until
every member reports healthy, and ends only its own processes, by PID. Members can be killed with
SIGKILL and restarted on the same ports and data, to exercise failover.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from types import TracebackType

from herder.state.free_ports import free_port

ETCD = "etcd"


def etcd_available() -> bool:
    """Whether the etcd binary is on PATH (tests skip the etcd runs without it)."""
    return shutil.which(ETCD) is not None


class EtcdCluster:
    """``members`` etcd processes forming one cluster on 127.0.0.1; a context manager."""

    def __init__(
        self, members: int = 1, data_dir: Path | None = None, *, start_timeout: float = 30.0
    ) -> None:
        if members < 1:
            raise ValueError("an etcd cluster needs at least one member")
        self.members = members
        self._own_dir = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="herder-etcd-")) if data_dir is None else Path(data_dir)
        self._start_timeout = start_timeout
        self._client_ports = [free_port() for _ in range(members)]
        self._peer_ports = [free_port() for _ in range(members)]
        self._token = f"herder-{uuid.uuid4().hex[:12]}"
        self._procs: list[subprocess.Popen[bytes] | None] = [None] * members

    @property
    def endpoints(self) -> list[str]:
        return [f"127.0.0.1:{port}" for port in self._client_ports]

    def _name(self, i: int) -> str:
        return f"m{i}"

    def _log_path(self, i: int) -> Path:
        return self.data_dir / f"{self._name(i)}.log"

    def _command(self, i: int) -> list[str]:
        client = f"http://127.0.0.1:{self._client_ports[i]}"
        peer = f"http://127.0.0.1:{self._peer_ports[i]}"
        cluster = ",".join(f"{self._name(j)}=http://127.0.0.1:{p}" for j, p in enumerate(self._peer_ports))
        return [
            ETCD,
            f"--name={self._name(i)}",
            f"--data-dir={self.data_dir / self._name(i)}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster={cluster}",
            f"--initial-cluster-token={self._token}",
            # A restarted member finds its data dir and rejoins; the state flag only matters the first time.
            "--initial-cluster-state=new",
            # Loopback peers answer in microseconds: short raft timings make elections (and tests) fast.
            "--heartbeat-interval=50",
            "--election-timeout=500",
            "--logger=zap",
            "--log-outputs=stderr",
        ]

    def _spawn(self, i: int) -> None:
        with open(self._log_path(i), "ab") as log:
            self._procs[i] = subprocess.Popen(
                self._command(i), stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )

    def _healthy(self, i: int) -> bool:
        url = f"http://{self.endpoints[i]}/health"
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                return b'"true"' in resp.read()
        except (urllib.error.URLError, OSError):
            return False

    def _wait_healthy(self, indexes: list[int]) -> None:
        deadline = time.monotonic() + self._start_timeout
        waiting = list(indexes)
        while waiting:
            for i in list(waiting):
                proc = self._procs[i]
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(
                        f"etcd member {self._name(i)} exited with {proc.returncode}:\n{self.log_tail(i)}"
                    )
                if self._healthy(i):
                    waiting.remove(i)
            if waiting and time.monotonic() > deadline:
                raise TimeoutError(
                    f"etcd members {[self._name(i) for i in waiting]} not healthy after {self._start_timeout} s:\n"
                    + "\n".join(self.log_tail(i) for i in waiting)
                )
            if waiting:
                time.sleep(0.05)

    def log_tail(self, i: int, lines: int = 20) -> str:
        try:
            return "\n".join(self._log_path(i).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def start(self) -> EtcdCluster:
        """Start every member and wait until each is healthy (has a leader)."""
        if not etcd_available():
            raise FileNotFoundError(
                f"the {ETCD} binary is not installed (Debian: apt-get install etcd-server)"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        try:
            for i in range(self.members):
                self._spawn(i)
            self._wait_healthy(list(range(self.members)))
        except BaseException:
            self.stop()
            raise
        return self

    def leader(self) -> int | None:
        """The index of the member that leads the raft group now, if a running member knows one."""
        for i, endpoint in enumerate(self.endpoints):
            if self.pid(i) is None:
                continue
            request = urllib.request.Request(
                f"http://{endpoint}/v3/maintenance/status", data=b"{}", method="POST"
            )
            try:
                with urllib.request.urlopen(request, timeout=1) as resp:
                    status = json.loads(resp.read())
            except (urllib.error.URLError, OSError, ValueError):
                continue
            # Each member reports its own id and the leader's: the leader is the one naming itself.
            if status.get("leader") == status.get("header", {}).get("member_id"):
                return i
        return None

    def pid(self, i: int) -> int | None:
        proc = self._procs[i]
        return proc.pid if proc is not None and proc.poll() is None else None

    def kill(self, i: int) -> None:
        """SIGKILL member ``i`` (its data stays, so it can be restarted)."""
        proc = self._procs[i]
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()

    def restart(self, i: int) -> None:
        """Start member ``i`` again on its ports and data, and wait until it is healthy."""
        self.kill(i)
        self._spawn(i)
        self._wait_healthy([i])

    def stop(self) -> None:
        """End this cluster's own processes by PID, and remove its data unless the caller gave the directory.

        SIGKILL, not SIGTERM: the last members of a stopping cluster wait seconds for a quorum that is
        gone, and etcd's write-ahead log is synced, so a data dir given by the caller stays usable.
        """
        atexit.unregister(self.stop)
        for i in range(self.members):
            self.kill(i)
        self._procs = [None] * self.members
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EtcdCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


__all__ = ["EtcdCluster", "etcd_available"]
