"""Config history: each config ConfigApply applies is recorded as a diff from the one before, with secrets
redacted; the newest 100 are kept, none older than 30 days (ConfigHistoryRetention ages them out even when
nothing new is applied); a machine in another cluster starts over; the platform's machines' histories are
hidden."""

from __future__ import annotations

import yaml

from herder.controllers.clusters.config_apply import ConfigApplyController
from herder.controllers.clusters.config_history import record_applied
from herder.controllers.clusters.config_history_retention import ConfigHistoryRetentionController
from herder.resources.access import HIDDEN_LABEL, READ_ONLY_ANNOTATION
from herder.resources.config_history import MAX_AGE_SECONDS, MAX_ENTRIES, REDACTED
from herder.runtime.controller import ObjectKey
from herder.talos.config_redaction import redact_config
from herder.talos.machine import ApplyMode, ApplyResult
from herder.talos.machine.pool import ClientPool
from tests.controllers.fleet import Fleet
from tests.controllers.site import Site

CONFIG = """\
version: v1alpha1
machine:
  type: worker
  token: abcdef.0123456789abcdef
  ca:
    crt: LS0tLS1CRUdJTi==
    key: ""
  registries:
    config:
      registry.example:
        auth:
          username: bot
          password: hunter2
  wireguard:
    publicKey: c2VlLW1l
  sysctls:
    kernel.domainname: {domain}
cluster:
  secret: c2VjcmV0LXNlY3JldA==
  secretboxEncryptionSecret: Ym94LWtleQ==
  serviceAccount:
    key: LS0tLS1CRUdJTiBQUklWQVRF
---
apiVersion: v1alpha1
kind: KubeServiceAccountConfig
issuer:
  privateKey: LS0tLS1QUklW
"""

SECRETS = (
    "abcdef.0123456789abcdef",
    "hunter2",
    "c2VjcmV0LXNlY3JldA==",
    "Ym94LWtleQ==",
    "LS0tLS1CRUdJTiBQUklWQVRF",
    "LS0tLS1QUklW",
)
KEY = ObjectKey("MachineConfigHistory", "default", "w1")


def config(domain: str) -> str:
    return CONFIG.replace("{domain}", domain)


def test_secrets_are_redacted_and_the_rest_kept() -> None:
    redacted = redact_config(config("a.example"))
    assert not any(secret in redacted for secret in SECRETS)
    first, second = yaml.safe_load_all(redacted)
    assert first["machine"]["token"] == REDACTED and first["cluster"]["serviceAccount"]["key"] == REDACTED
    assert first["machine"]["registries"]["config"]["registry.example"]["auth"] == REDACTED
    assert second["issuer"]["privateKey"] == REDACTED
    # Public parts, and empty values, stay as they are.
    assert first["machine"]["ca"] == {"crt": "LS0tLS1CRUdJTi==", "key": ""}
    assert first["machine"]["wireguard"]["publicKey"] == "c2VlLW1l"
    assert first["machine"]["sysctls"] == {"kernel.domainname": "a.example"}
    assert redact_config("{not: yaml: at all") == REDACTED


async def test_every_apply_is_recorded_as_a_redacted_diff_from_the_one_before(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    await fleet.machine_set("workers")
    await fleet.machine("w1", stage="Maintenance")
    member = await fleet.member("w1")
    apply = ConfigApplyController(fleet.keys, ClientPool(dialer=site.machines, keep=0))
    site.machines.answer("apply_configuration", ApplyResult(ApplyMode.NO_REBOOT, ""))
    made = await fleet.config(member, "c1")
    await _replace(site, made, config("a.example"))
    await site.reconcile(apply, ObjectKey.of(member))
    history = await site.get("MachineConfigHistory", "w1")
    assert history is not None and history.metadata.labels["herder.dev/cluster"] == fleet.name
    (first,) = (history.spec or {})["entries"]
    assert (first["revision"], first["hash"], first["mode"]) == (1, "c1", "maintenance")
    assert first["diff"].startswith("--- previous\n+++ applied\n") and first["removed"] == 0
    assert not any(secret in str(history.spec) for secret in SECRETS)

    # The machine runs; a patch changes its config.
    machine = await site.get("Machine", "w1")
    assert machine is not None
    await site.set_status(machine, stage="Running", maintenance=False)
    await site.set_status(member, stage="Running", ready=True)
    changed = await site.get("ClusterMachineConfig", "w1")
    assert changed is not None
    await _replace(site, changed, config("b.example"), digest="c2")
    await site.reconcile(apply, ObjectKey.of(member))
    entries = ((await site.get("MachineConfigHistory", "w1")).spec or {})["entries"]  # type: ignore[union-attr]
    assert [(e["revision"], e["hash"], e["mode"]) for e in entries] == [
        (1, "c1", "maintenance"),
        (2, "c2", "no reboot"),
    ]
    assert (entries[1]["added"], entries[1]["removed"]) == (1, 1)
    assert (
        "-        kernel.domainname: a.example\n+        kernel.domainname: b.example" in entries[1]["diff"]
    )
    # The same config recorded again (applied again after a crash) adds nothing.
    await record_applied(site.context(apply), member, config("b.example"), "c2", "", "no reboot")
    assert len(((await site.get("MachineConfigHistory", "w1")).spec or {})["entries"]) == 2  # type: ignore[union-attr]


async def test_the_newest_hundred_are_kept_and_another_cluster_starts_over(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    member = await fleet.member("w1")
    ctx = site.context(ConfigApplyController(fleet.keys))
    for i in range(MAX_ENTRIES + 5):
        await record_applied(ctx, member, config(f"{i}.example"), f"h{i}", "", "no reboot")
    entries = ((await site.get("MachineConfigHistory", "w1")).spec or {})["entries"]  # type: ignore[union-attr]
    assert len(entries) == MAX_ENTRIES
    assert (entries[0]["revision"], entries[-1]["revision"]) == (6, MAX_ENTRIES + 5)

    moved = member.clone()
    moved.metadata.labels["herder.dev/cluster"] = "beta"
    await record_applied(ctx, moved, config("beta.example"), "b1", "", "maintenance")
    history = await site.get("MachineConfigHistory", "w1")
    assert history is not None and history.metadata.labels["herder.dev/cluster"] == "beta"
    assert [e["revision"] for e in (history.spec or {})["entries"]] == [1]


async def test_old_entries_age_out_and_an_empty_history_goes(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    member = await fleet.member("w1")
    ctx = site.context(ConfigApplyController(fleet.keys))
    await record_applied(ctx, member, config("a.example"), "h1", "", "maintenance")
    site.clock.advance(10 * 24 * 3600)
    await record_applied(ctx, member, config("b.example"), "h2", "", "no reboot")
    retention = ConfigHistoryRetentionController()
    result = await site.reconcile(retention, KEY)
    assert result is not None and result.requeue_after == MAX_AGE_SECONDS - 10 * 24 * 3600
    site.clock.advance(21 * 24 * 3600)
    await site.reconcile(retention, KEY)
    entries = ((await site.get("MachineConfigHistory", "w1")).spec or {})["entries"]  # type: ignore[union-attr]
    assert [e["hash"] for e in entries] == ["h2"]
    site.clock.advance(10 * 24 * 3600)
    await site.reconcile(retention, KEY)
    assert await site.get("MachineConfigHistory", "w1") is None


async def test_the_platforms_machines_histories_are_hidden(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster()
    member = await fleet.member("cp1", "controlplane")
    marked = member.clone()
    marked.metadata.annotations[READ_ONLY_ANNOTATION] = "managed control plane"
    member = await site.store.update(marked)
    await record_applied(
        site.context(ConfigApplyController(fleet.keys)), member, config("x"), "h1", "", "maintenance"
    )
    assert await site.get("MachineConfigHistory", "cp1") is None
    hidden = await site.get("MachineConfigHistory", "herder-cp1")
    assert hidden is not None and HIDDEN_LABEL in hidden.metadata.labels


async def _replace(site: Site, made: object, text: str, digest: str | None = None) -> None:
    current = await site.get("ClusterMachineConfig", made.name)  # type: ignore[attr-defined]
    assert current is not None
    changed = current.clone()
    changed.spec = {**(current.spec or {}), "config": text, **({"hash": digest} if digest else {})}
    await site.store.update(changed)
