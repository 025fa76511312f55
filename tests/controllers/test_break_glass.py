"""The break-glass talosconfig of a cluster: an os:admin talosconfig from the cluster's own Talos CA whose
endpoints are its control planes, marked on the cluster; refused while there is no control plane, and for
a cluster whose control planes the platform runs, to all but Support."""

from __future__ import annotations

import pytest

from herder.controllers.clusters.credentials import ClusterCredentials, CredentialsUnavailable
from herder.talos import pki
from herder.talos.talosconfig import load_talosconfig
from tests.controllers.fleet import Fleet
from tests.controllers.managed import managed_site
from tests.controllers.site import Site


async def test_it_points_at_the_control_planes_and_marks_the_cluster(site: Site) -> None:
    fleet = Fleet(site)
    cluster = await fleet.cluster()
    credentials = ClusterCredentials(fleet.keys)
    with pytest.raises(CredentialsUnavailable, match="no secrets or control planes yet"):
        await credentials.break_glass_talosconfig(cluster, "ada", "Admin", {})
    for uuid in ("cp1", "cp2"):
        await fleet.machine(uuid)
        await fleet.member(uuid, "controlplane")
    await fleet.machine("w1")
    await fleet.member("w1")
    text = await credentials.break_glass_talosconfig(cluster, "ada", "Admin", {"ttlSeconds": 60})
    context = load_talosconfig(text.decode()).current()
    assert context.endpoints == (fleet.endpoint("cp1"), fleet.endpoint("cp2"))
    bundle = await fleet.keys.of(cluster)
    assert bundle is not None and context.ca == bundle.bundle.os.crt
    cert = pki.load_certificate(context.crt)
    assert cert.issuer == pki.load_certificate(bundle.bundle.os.crt).subject
    marked = await site.get("Cluster", fleet.name)
    assert marked is not None and marked.metadata.annotations["herder.dev/break-glass-issued"].endswith(
        " ada"
    )
    with pytest.raises(CredentialsUnavailable, match="ttlSeconds"):
        await credentials.break_glass_talosconfig(cluster, "ada", "Admin", {"ttlSeconds": 0})


async def test_a_managed_clusters_is_for_support_only(site: Site) -> None:
    fleet = Fleet(site)
    cluster = await managed_site(site)
    await site.cluster_secrets(cluster)
    await fleet.machine("cp1")
    await fleet.member("cp1", "controlplane")
    credentials = ClusterCredentials(fleet.keys)
    with pytest.raises(CredentialsUnavailable, match="the platform's"):
        await credentials.break_glass_talosconfig(cluster, "ada", "Admin", {})
    assert await credentials.break_glass_talosconfig(cluster, "staff", "Support", {})
