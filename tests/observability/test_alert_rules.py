"""herder's Prometheus alerting rules (deploy/prometheus) pass ``promtool check rules`` and their unit tests
(``promtool test rules``), and alert only on metrics herder exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import REGISTRY

from herder.controllers.backups.policy import managed_policy
from herder.controllers.observability.cluster_metrics import ClusterMetrics
from herder.resources.catalog import herder_registry
from herder.state.memory import MemoryBackend
from herder.state.store import Store

RULES = Path(__file__).parents[2] / "deploy" / "prometheus"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool (Debian's prometheus) is not installed"
)


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60, cwd=RULES)


@needs_promtool
def test_the_rules_are_valid() -> None:
    checked = promtool("check", "rules", "herder-rules.yaml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 12 rules found" in checked.stdout


@needs_promtool
def test_the_rules_pass_their_unit_tests() -> None:
    tested = promtool("test", "rules", "herder-rules.test.yaml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # Every alert is tested.
    alerts = {
        r["alert"]
        for g in yaml.safe_load((RULES / "herder-rules.yaml").read_text())["groups"]
        for r in g["rules"]
    }
    tests = yaml.safe_load((RULES / "herder-rules.test.yaml").read_text())["tests"]
    assert alerts == {t["alertname"] for test in tests for t in test["alert_rule_test"]}


async def test_the_rules_alert_on_metrics_herder_exports() -> None:
    store = Store(MemoryBackend(), herder_registry())
    await store.start()
    try:
        metrics = ClusterMetrics(store, managed_policy())
        await metrics.refresh()
        exported = {family.name for family in metrics.collect()}
    finally:
        await store.close()
    exported |= {name for family in REGISTRY.collect() for name in (family.name,)}
    used = set(re.findall(r"\bherder_[a-z_]+", (RULES / "herder-rules.yaml").read_text()))
    assert used and used <= exported, used - exported
