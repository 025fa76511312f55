"""Where the emulator keeps what must survive a restart, under its data directory:

- ``machines.json``: the published list of machines (uuid, endpoint, node) for tools and tests;
- ``emulator.json``: where its control API listens and its pid;
- ``machines/<uuid>.json`` and ``clusters/<id>.json``: each machine's and cluster's state.

Files are replaced atomically (write, then rename), so a crash never leaves half a file.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from herder.emu.cluster.state import Cluster
from herder.emu.machine.record import MachineRecord


def _write(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._machines = root / "machines"
        self._clusters = root / "clusters"
        self._machines.mkdir(parents=True, exist_ok=True)
        self._clusters.mkdir(parents=True, exist_ok=True)

    def save_machine(self, record: MachineRecord) -> None:
        _write(self._machines / f"{record.uuid}.json", record.to_json())

    def load_machine(self, uuid: str) -> MachineRecord | None:
        path = self._machines / f"{uuid}.json"
        if not path.exists():
            return None
        return MachineRecord.from_json(json.loads(path.read_text()))

    def delete_machine(self, uuid: str) -> None:
        (self._machines / f"{uuid}.json").unlink(missing_ok=True)

    def load_machines(self) -> list[MachineRecord]:
        records = [MachineRecord.from_json(json.loads(p.read_text())) for p in self._machines.glob("*.json")]
        return sorted(records, key=lambda r: tuple(int(x) for x in r.address.split(".")))

    def save_cluster(self, cluster: Cluster) -> None:
        _write(self._clusters / f"{_file_id(cluster.id)}.json", cluster.to_json())

    def load_clusters(self) -> list[Cluster]:
        return [Cluster.from_json(json.loads(p.read_text())) for p in self._clusters.glob("*.json")]

    def publish(self, machines: list[MachineRecord]) -> None:
        _write(
            self.root / "machines.json",
            [{"uuid": r.uuid, "endpoint": r.endpoint, "node": r.address} for r in machines],
        )

    def write_info(self, control_url: str) -> None:
        _write(self.root / "emulator.json", {"control": control_url, "pid": os.getpid()})


def read_info(root: Path) -> dict[str, Any]:
    """What ``write_info`` wrote: the control API's URL and the emulator's pid."""
    data: dict[str, Any] = json.loads((root / "emulator.json").read_text())
    return data


def _file_id(cluster_id: str) -> str:
    # Cluster ids are base64 (with / and +): name files by a digest of them.
    return hashlib.sha256(cluster_id.encode()).hexdigest()[:32]
