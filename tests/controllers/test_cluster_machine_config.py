"""ClusterMachineConfigController's decisions: a member's Talos config is generated from its cluster's secrets
and endpoint, with the patches that target it layered cluster → machine, onto the install disk its node or
its machine names; a patch that touches what herder owns stops at the machine, told once, and the last good
config stays."""

from __future__ import annotations

import hashlib
import os
from urllib.parse import parse_qs, urlsplit

import yaml

from herder.controllers.clusters.cluster_machine_config import ClusterMachineConfigController
from herder.runtime.controller import ObjectKey
from herder.talos.siderolink.rejoin import Rejoin, admits
from tests.controllers.fleet import KUBERNETES, TALOS, Fleet
from tests.controllers.site import Site, obj

KEY = ObjectKey("ClusterMachine", "default", "m1")
ENDPOINT = "https://k8s.example.com:6443"


async def generated(site: Site, controller: ClusterMachineConfigController) -> dict[str, object] | None:
    await site.reconcile(controller, KEY)
    made = await site.get("ClusterMachineConfig", "m1")
    return made.spec if made is not None else None


def machine_document(config: object) -> dict[str, dict[str, object]]:
    assert isinstance(config, str)
    return next(d for d in yaml.safe_load_all(config) if d and "machine" in d)


async def patch(site: Site, name: str, data: str, **labels: str) -> None:
    await site.create(obj("ConfigPatch", name, spec={"data": data}, metadata={"labels": labels}))


async def valid(site: Site) -> tuple[str, str, str]:
    status = await site.status("ClusterMachine", "m1")
    (found,) = [c for c in status["conditions"] if c["type"] == "ConfigValid"]
    return found["status"], found["reason"], found["message"]


async def test_a_members_config_is_made_from_its_clusters_secrets_and_endpoint(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster(endpoint=ENDPOINT)
    await fleet.machine("m1", hardware={"disks": [{"name": "nvme0n1"}]})
    await fleet.member("m1")
    spec = await generated(site, ClusterMachineConfigController(fleet.keys))
    assert spec is not None
    config = spec["config"]
    assert isinstance(config, str)
    assert spec["hash"] == hashlib.sha256(config.encode()).hexdigest()
    assert (spec["talosContract"], spec["talosVersion"], spec["kubernetesVersion"]) == (
        "1.13",
        TALOS,
        KUBERNETES,
    )
    document = machine_document(config)
    assert document["machine"]["type"] == "worker"
    assert document["machine"]["install"]["disk"] == "/dev/nvme0n1"  # type: ignore[index]
    assert document["cluster"]["controlPlane"]["endpoint"] == ENDPOINT  # type: ignore[index]
    # No fault, no condition: the config tells it, without a write of the member.
    assert "conditions" not in await site.status("ClusterMachine", "m1")


async def test_the_nodes_install_disk_wins_over_the_machines_first(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster(endpoint=ENDPOINT)
    await fleet.machine_set("workers")
    await fleet.machine("m1", hardware={"disks": [{"name": "nvme0n1"}]})
    await fleet.node("m1", "workers", installDisk="/dev/vdb")
    await fleet.member("m1")
    spec = await generated(site, ClusterMachineConfigController(fleet.keys))
    assert spec is not None
    assert machine_document(spec["config"])["machine"]["install"]["disk"] == "/dev/vdb"  # type: ignore[index]


async def test_patches_layer_from_the_cluster_to_the_machine(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster(endpoint=ENDPOINT)
    await fleet.machine("m1")
    await fleet.member("m1")
    await patch(
        site,
        "100-cluster",
        "machine:\n  env:\n    LAYER: cluster\n",
        **{"herder.dev/cluster": "alpha"},
    )
    await patch(
        site,
        "100-machine",
        "machine:\n  env:\n    LAYER: machine\n",
        **{"herder.dev/machine": "m1"},
    )
    await patch(site, "100-other", "machine:\n  env:\n    LAYER: other\n", **{"herder.dev/machine": "m2"})
    spec = await generated(site, ClusterMachineConfigController(fleet.keys))
    assert spec is not None, await valid(site)
    assert machine_document(spec["config"])["machine"]["env"] == {"LAYER": "machine"}


async def test_a_patch_touching_what_herder_owns_stops_at_the_machine(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster(endpoint=ENDPOINT)
    await fleet.machine("m1")
    member = await fleet.member("m1")
    controller = ClusterMachineConfigController(fleet.keys)
    good = await generated(site, controller)
    assert good is not None
    await patch(site, "200-rename", "cluster:\n  clusterName: other\n", **{"herder.dev/cluster": "alpha"})
    assert await generated(site, controller) == good  # the last good config stays
    why = "config patch '200-rename' may not change cluster.clusterName"
    assert await valid(site) == ("False", "InvalidConfig", why)
    await generated(site, controller)
    assert [t for t in await site.told(member) if t[1] == "InvalidConfig"] == [
        ("Warning", "InvalidConfig", why)
    ]

    await site.store.delete("ConfigPatch", "200-rename", "default")
    await generated(site, controller)
    assert await valid(site) == ("True", "Generated", "")


async def test_nothing_is_made_before_the_cluster_has_secrets_and_an_endpoint(site: Site) -> None:
    fleet = Fleet(site)
    await fleet.cluster(secrets=False, endpoint=ENDPOINT)
    await fleet.machine("m1")
    await fleet.member("m1")
    assert await generated(site, ClusterMachineConfigController(fleet.keys)) is None
    other = Fleet(site, "beta")
    await other.cluster()  # no endpoint of its own, none given by herder's balancer yet
    await other.member("b1")
    await site.reconcile(
        ClusterMachineConfigController(other.keys), ObjectKey("ClusterMachine", "default", "b1")
    )
    assert await site.get("ClusterMachineConfig", "b1") is None


async def _joined_member(site: Site, join_token: str) -> Fleet:
    """A cluster whose member m1 joined over SideroLink with ``join_token``."""
    fleet = Fleet(site)
    await fleet.cluster(endpoint=ENDPOINT)
    await fleet.machine("m1")
    await fleet.member("m1")
    link = {
        "nodePublicKey": "k" * 43 + "=",
        "nodeAddress": "fdae:41e4:649b:9303::2a/64",
        "joinToken": join_token,
    }
    await site.create(obj("SideroLink", "m1", spec=link))
    return fleet


async def test_a_machine_joined_with_its_providers_token_keeps_its_siderolink_settings(site: Site) -> None:
    args = [
        "siderolink.api=grpc://192.0.2.7:8099?jointoken=provider-secret",
        "talos.events.sink=[fdae:41e4:649b:9303::1]:8090",
        "talos.logging.kernel=tcp://[fdae:41e4:649b:9303::1]:8092",
    ]
    await site.create(
        obj(
            "JoinConfig",
            "edge",
            namespaced=False,
            spec={"endpoint": "https://h:1", "token": "provider-secret", "kernelArgs": args},
        )
    )
    fleet = await _joined_member(site, "provider/edge")
    spec = await generated(site, ClusterMachineConfigController(fleet.keys))
    assert spec is not None
    documents = {d.get("kind"): d for d in yaml.safe_load_all(str(spec["config"])) if d}
    assert documents["SideroLinkConfig"]["apiUrl"] == "grpc://192.0.2.7:8099?jointoken=provider-secret"
    assert documents["EventSinkConfig"]["endpoint"] == "[fdae:41e4:649b:9303::1]:8090"
    assert documents["KmsgLogConfig"]["url"] == "tcp://[fdae:41e4:649b:9303::1]:8092"


async def test_a_machine_joined_with_a_join_token_rejoins_with_its_own_token(site: Site) -> None:
    """herder keeps only a JoinToken's digest: the config says the machine's own rejoin token instead."""
    fleet = await _joined_member(site, "rack-1")
    key = os.urandom(32)
    rejoin = Rejoin(key, "grpc://192.0.2.7:8099", "fdae:41e4:649b:9303::1")
    spec = await generated(site, ClusterMachineConfigController(fleet.keys, rejoin))
    assert spec is not None
    documents = {d.get("kind"): d for d in yaml.safe_load_all(str(spec["config"])) if d}
    url = urlsplit(documents["SideroLinkConfig"]["apiUrl"])
    assert f"{url.scheme}://{url.netloc}" == "grpc://192.0.2.7:8099"
    (token,) = parse_qs(url.query)["jointoken"]
    assert admits(key, token, "m1") and not admits(key, token, "m2")
    assert documents["EventSinkConfig"]["endpoint"] == "[fdae:41e4:649b:9303::1]:8090"


async def test_without_siderolink_a_join_token_machine_gets_no_siderolink_settings(site: Site) -> None:
    fleet = await _joined_member(site, "rack-1")
    spec = await generated(site, ClusterMachineConfigController(fleet.keys))
    assert spec is not None and "SideroLinkConfig" not in str(spec["config"])
