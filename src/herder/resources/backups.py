"""etcd backups: where they go (BackupStore), each backup taken (EtcdBackup), the per-cluster key that
encrypts them (EtcdBackupKey), and what clusters and control plane sets say about them.

A Cluster's ``spec.backups`` asks for a backup every ``interval``, keeping the newest ``retention``, in
the BackupStore named ``store`` (``default`` is herder's folder ``DATA_DIR/backups`` unless an Admin
makes a BackupStore of that name). Each backup is an EtcdBackup named ``<cluster>-<unix time>``, whose
``spec.clusterUUID`` (the Cluster's ``metadata.uid``) and ``spec.snapshot`` are what a new cluster's
control plane set names in ``spec.bootstrapSpec`` to be restored from it. Backups outlive their cluster,
and so does the key that encrypts them, which never leaves herder's store (sealed at rest).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from herder.resources.configuration import GROUP, VERSION
from herder.resources.machines import CLUSTER_LABEL
from herder.resources.registry import KindInfo, PrinterColumn, label_path

_STRICT = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

DEFAULT_STORE = "default"
DEFAULT_RETENTION = 24
MIN_INTERVAL_SECONDS = 1.0

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(text: str) -> float:
    """A Go duration (``90s``, ``1m``, ``1h30m``, ``1.5h``), as Omni's templates write it, in seconds."""
    value = text.strip()
    position, total = 0, 0.0
    for match in _DURATION_PART.finditer(value):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if not value or position != len(value):
        raise ValueError(f"invalid duration {text!r}: expected a number and a unit, as in 30s, 1m, 1h30m")
    return total


class ClusterBackups(BaseModel):
    """``Cluster.spec.backups``: a backup every ``interval``, the newest ``retention`` kept, in ``store``."""

    model_config = _STRICT

    interval: str = Field(description="how often: a duration such as 1m, 1h, 24h")
    retention: int = Field(default=DEFAULT_RETENTION, ge=1, description="how many backups to keep")
    store: str = Field(default=DEFAULT_STORE, min_length=1, description="the BackupStore to write to")

    @field_validator("interval")
    @classmethod
    def _interval(cls, value: str) -> str:
        if duration_seconds(value) < MIN_INTERVAL_SECONDS:
            raise ValueError(
                f"interval {value!r} is shorter than {MIN_INTERVAL_SECONDS:g}s "
                "(leave spec.backups out to take no scheduled backups)"
            )
        return value.strip()

    @property
    def interval_seconds(self) -> float:
        return duration_seconds(self.interval)


class BackupsStatus(BaseModel):
    """``Cluster.status.backups``: how the cluster's backups go. An error stays until a later success."""

    model_config = _STRICT

    last_backup: str = Field(default="", alias="lastBackup", description="the newest EtcdBackup taken")
    last_success_time: str = Field(default="", alias="lastSuccessTime")
    last_attempt_time: str = Field(default="", alias="lastAttemptTime")
    last_error: str = Field(default="", alias="lastError")
    failures: int = Field(default=0, description="attempts failed since the last success")
    requested: int = Field(default=0, description="backups asked for by hand (herder cluster backup)")
    served: int = Field(default=0, description="the requests the last attempt answered")


class BootstrapSpec(BaseModel):
    """``MachineSet.spec.bootstrapSpec`` (control plane sets): bootstrap etcd from this backup."""

    model_config = _STRICT

    cluster_uuid: str = Field(alias="clusterUUID", min_length=1, description="the backed-up cluster's UUID")
    snapshot: str = Field(min_length=1, description="the EtcdBackup's spec.snapshot")


class FilesystemStore(BaseModel):
    model_config = _STRICT

    path: str = Field(description="an absolute folder on the host that runs herder's controllers")

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"path {value!r} must be absolute")
        return value


class S3Store(BaseModel):
    model_config = _STRICT

    bucket: str = Field(min_length=3, max_length=63)
    region: str = Field(default="us-east-1", min_length=1)
    endpoint: str = Field(default="", description="an S3-compatible server's URL; empty: AWS")
    access_key_id: str = Field(alias="accessKeyID", min_length=1)
    secret_access_key: str = Field(alias="secretAccessKey", min_length=1)

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        if value and not re.match(r"^https?://[^/\s]+/?$", value):
            raise ValueError(f"invalid endpoint {value!r}: expected http(s)://HOST[:PORT]")
        return value.rstrip("/")


class BackupStoreSpec(BaseModel):
    model_config = _STRICT

    filesystem: FilesystemStore | None = None
    s3: S3Store | None = None

    @model_validator(mode="after")
    def _one(self) -> BackupStoreSpec:
        if (self.filesystem is None) == (self.s3 is None):
            raise ValueError("a backup store is spec.filesystem or spec.s3: exactly one of them")
        return self


class EtcdBackupSpec(BaseModel):
    model_config = _STRICT

    cluster_uuid: str = Field(alias="clusterUUID", description="the UUID of the cluster backed up")
    snapshot: str = Field(description="the name to restore from (bootstrapSpec.snapshot)")
    size: int = Field(ge=0, description="bytes in the store (encrypted)")
    store: str = Field(description="the BackupStore holding it")
    checksum: str = Field(description="sha256:HEX of what the store holds")
    taken_at: str = Field(alias="takenAt")
    machine: str = Field(default="", description="the control plane the snapshot came from")
    encryption_secrets: str = Field(
        default="",
        alias="encryptionSecrets",
        description="the cluster's Kubernetes encryption secrets, sealed with the backup's key (a restore needs them)",
    )


class EtcdBackupKeySpec(BaseModel):
    model_config = _STRICT

    key: str = Field(description="the AES-256-GCM key of the cluster's backups, base64")


def _size(obj: dict[str, Any]) -> str:
    size = float((obj.get("spec") or {}).get("size") or 0)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    raise AssertionError("unreachable")


BACKUP_STORE = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="BackupStore",
    plural="backupstores",
    namespaced=False,
    spec_model=BackupStoreSpec,
    categories=("herder",),
    sensitive=True,
    printer_columns=(
        PrinterColumn("Path", ".spec.filesystem.path"),
        PrinterColumn("Bucket", ".spec.s3.bucket"),
        PrinterColumn("Endpoint", ".spec.s3.endpoint"),
    ),
    description="Where etcd backups go: a folder, or an S3 bucket (its credentials sealed at rest).",
)

ETCD_BACKUP = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="EtcdBackup",
    plural="etcdbackups",
    spec_model=EtcdBackupSpec,
    categories=("herder",),
    printer_columns=(
        PrinterColumn("Cluster", label_path(CLUSTER_LABEL)),
        PrinterColumn("Time", ".spec.takenAt"),
        PrinterColumn("Size", ".spec.size", compute=_size),
        PrinterColumn("Store", ".spec.store"),
        PrinterColumn("Snapshot", ".spec.snapshot", priority=1),
        PrinterColumn("Cluster-UUID", ".spec.clusterUUID", priority=1),
    ),
    field_selectors=("spec.clusterUUID", "spec.snapshot"),
    description="One encrypted etcd snapshot of a cluster in a backup store; restore it with bootstrapSpec.",
)

ETCD_BACKUP_KEY = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="EtcdBackupKey",
    plural="etcdbackupkeys",
    spec_model=EtcdBackupKeySpec,
    sensitive=True,
    description="The key encrypting one cluster's etcd backups (named by its UUID); sealed, never in a store.",
)

BACKUP_KINDS = (BACKUP_STORE, ETCD_BACKUP, ETCD_BACKUP_KEY)
