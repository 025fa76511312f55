"""Config history on the emulator, as users read it: a changed config patch shows as its diff in ``herder
machine config-history UUID`` and on the UI's machine page, secrets redacted; a Reader is refused both."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.server import HERDER
from tests.clusters.site import Site, cluster, machine_set, running_site
from tests.web.ui import Ui

pytestmark = pytest.mark.steps

# A line whose value is a secret that was not redacted (a key, a token, a secret with a real value).
UNREDACTED = re.compile(r"^[+ -]\s*(key|token|secret|\w*EncryptionSecret): (?!'?\*{6})\S", re.MULTILINE)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with running_site(tmp_path_factory.mktemp("history"), 1) as s:
        s.apply(
            [
                cluster("hotel"),
                machine_set(
                    "hotel", "hotel-control-planes", "controlplane", machines=[s.machines[0]["uuid"]]
                ),
            ]
        )
        s.wait("cluster", "hotel", timeout=180)
        yield s


def _account(site: Site, name: str, role: str) -> tuple[Path, str]:
    config = site.workdir / f"{name}.kubeconfig"
    made = site.run(
        "herder", "serviceaccount", "create", name, "--role", role, "--write-kubeconfig", str(config)
    )
    return config, made.stdout.strip().splitlines()[-1]


def _history(
    site: Site, uuid: str, *args: str, kubeconfig: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            HERDER,
            "machine",
            "config-history",
            uuid,
            *args,
            "--kubeconfig",
            str(kubeconfig or site.server.kubeconfig),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _patch(site: Site, domain: str) -> None:
    site.apply(
        [
            {
                "apiVersion": "herder.dev/v1alpha1",
                "kind": "ConfigPatch",
                "metadata": {
                    "name": "hotel-domain",
                    "namespace": "default",
                    "labels": {"herder.dev/cluster": "hotel"},
                },
                "spec": {"data": f"machine:\n  sysctls:\n    kernel.domainname: {domain}\n"},
            }
        ]
    )


def _revisions(site: Site, uuid: str) -> list[dict[str, object]]:
    shown = _history(site, uuid, "-o", "json")
    assert shown.returncode == 0, shown.stderr
    return list(json.loads(shown.stdout))


def test_the_first_config_is_the_first_revision_with_its_secrets_redacted(site: Site) -> None:
    uuid = site.machines[0]["uuid"]
    (first,) = _revisions(site, uuid)
    assert (first["revision"], first["mode"]) == (1, "maintenance")
    diff = str(first["diff"])
    assert "machine:" in diff and "token: '******'" in diff
    assert not UNREDACTED.search(diff), UNREDACTED.search(diff)


def test_a_patch_change_shows_as_its_diff(site: Site) -> None:
    uuid = site.machines[0]["uuid"]
    _patch(site, "one.example")
    site.until(lambda: len(_revisions(site, uuid)) == 2, timeout=60, what="the patched config applied")
    _patch(site, "two.example")
    site.until(lambda: len(_revisions(site, uuid)) == 3, timeout=60, what="the changed patch applied")
    newest = _revisions(site, uuid)[0]
    assert (newest["revision"], newest["added"], newest["removed"]) == (3, 1, 1)
    text = _history(site, uuid, "--limit", "1")
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("revision 3  applied ")
    assert "-        kernel.domainname: one.example\n+        kernel.domainname: two.example\n" in text.stdout
    assert not UNREDACTED.search(text.stdout)


def test_an_operator_reads_it_on_the_machine_page_and_a_reader_is_refused(site: Site) -> None:
    uuid = site.machines[0]["uuid"]
    reader, reader_token = _account(site, "rhea", "Reader")
    refused = _history(site, uuid, kubeconfig=reader)
    assert refused.returncode != 0 and "two.example" not in refused.stdout
    assert "forbidden" in refused.stderr.lower() or "may not" in refused.stderr, refused.stderr
    _, operator_token = _account(site, "otto", "Operator")

    async def pages() -> tuple[str, str]:
        async with Ui(site.server) as ui:
            await ui.login(operator_token)
            shown = (await ui.page(f"/machines/{uuid}")).text
        async with Ui(site.server) as ui:
            await ui.login(reader_token)
            hidden = (await ui.page(f"/machines/{uuid}")).text
        return shown, hidden

    shown, hidden = asyncio.run(pages())
    assert "Config history" in shown and 'data-revision="3"' in shown
    assert "kernel.domainname: two.example" in shown and "******" in shown
    assert "two.example" not in hidden and "shown to the operators of its cluster" in hidden
