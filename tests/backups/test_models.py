"""The backup fields of Cluster, MachineSet and BackupStore, as users write them (and templates map them)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from herder.resources.backups import BackupStoreSpec, ClusterBackups, duration_seconds
from herder.resources.clusters import MachineSetSpec


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1m", 60), ("1h", 3600), ("1h30m", 5400), ("90s", 90), ("1.5h", 5400), ("500ms", 0.5)],
)
def test_durations(text: str, seconds: float) -> None:
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "1", "1d", "h", "1m 2s", "-1m"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        duration_seconds(text)


def test_cluster_backups_defaults_and_limits() -> None:
    backups = ClusterBackups.model_validate({"interval": "1m"})
    assert (backups.interval_seconds, backups.retention, backups.store) == (60, 24, "default")
    with pytest.raises(ValidationError, match="shorter than"):
        ClusterBackups.model_validate({"interval": "10ms"})
    with pytest.raises(ValidationError, match="retention"):
        ClusterBackups.model_validate({"interval": "1m", "retention": 0})


def test_bootstrap_spec_is_for_control_planes() -> None:
    spec = {"clusterUUID": "u", "snapshot": "1.snapshot"}
    assert MachineSetSpec.model_validate({"role": "controlplane", "bootstrapSpec": spec}).bootstrap_spec
    with pytest.raises(ValidationError, match="control plane sets only"):
        MachineSetSpec.model_validate({"role": "worker", "bootstrapSpec": spec})


def test_a_store_is_one_kind() -> None:
    with pytest.raises(ValidationError, match="exactly one"):
        BackupStoreSpec.model_validate({})
    with pytest.raises(ValidationError, match="absolute"):
        BackupStoreSpec.model_validate({"filesystem": {"path": "backups"}})
    s3 = {"bucket": "etcd", "accessKeyID": "a", "secretAccessKey": "s", "endpoint": "http://127.0.0.1:9000/"}
    assert BackupStoreSpec.model_validate({"s3": s3}).s3.endpoint == "http://127.0.0.1:9000"  # type: ignore[union-attr]
