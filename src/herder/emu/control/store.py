"""Where the emulator keeps what must survive a restart, under its data directory:

- ``machines.json``: the published list of machines (uuid, endpoint, node, power, bmc) for tools and tests;
- ``emulator.json``: where its control API listens (and its BMCs' Redfish service) and its pid;
- ``machines/<uuid>.json`` and ``clusters/<id>.json``: each machine's and cluster's state;
- ``bmc/<uuid>.json``: each emulated BMC's state, and ``bmc/ca.pem`` (``ca-key.pem``): the CA of the
  Redfish service's certificate, for clients that check it.

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
from herder.talos.pki import CertificateAndKey


def _write(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._machines = root / "machines"
        self._clusters = root / "clusters"
        self._bmcs = root / "bmc"
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

    def save_bmc(self, uuid: str, state: dict[str, Any]) -> None:
        self._bmcs.mkdir(exist_ok=True)
        _write(self._bmcs / f"{uuid}.json", state)

    def delete_bmc(self, uuid: str) -> None:
        (self._bmcs / f"{uuid}.json").unlink(missing_ok=True)

    def load_bmcs(self) -> dict[str, dict[str, Any]]:
        if not self._bmcs.is_dir():
            return {}
        return {p.stem: json.loads(p.read_text()) for p in self._bmcs.glob("*.json")}

    @property
    def bmc_ca_file(self) -> Path:
        return self._bmcs / "ca.pem"

    def load_bmc_ca(self) -> CertificateAndKey | None:
        key = self._bmcs / "ca-key.pem"
        if not (self.bmc_ca_file.exists() and key.exists()):
            return None
        return CertificateAndKey(self.bmc_ca_file.read_bytes(), key.read_bytes())

    def save_bmc_ca(self, ca: CertificateAndKey) -> None:
        self._bmcs.mkdir(exist_ok=True)
        key = self._bmcs / "ca-key.pem"
        key.touch(mode=0o600)
        key.write_bytes(ca.key)
        self.bmc_ca_file.write_bytes(ca.crt)

    def publish(self, machines: list[dict[str, Any]]) -> None:
        """``machines.json``: what tools and tests read of each machine (uuid, endpoint, node, power, bmc)."""
        _write(self.root / "machines.json", machines)

    def write_info(self, control_url: str, bmc_url: str = "") -> None:
        info = {"control": control_url, "pid": os.getpid(), **({"bmc": bmc_url} if bmc_url else {})}
        _write(self.root / "emulator.json", info)


def read_info(root: Path) -> dict[str, Any]:
    """What ``write_info`` wrote: the control API's URL and the emulator's pid."""
    data: dict[str, Any] = json.loads((root / "emulator.json").read_text())
    return data


def _file_id(cluster_id: str) -> str:
    # Cluster ids are base64 (with / and +): name files by a digest of them.
    return hashlib.sha256(cluster_id.encode()).hexdigest()[:32]
