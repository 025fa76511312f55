"""The Clusters page (phase, Ready, versions, machines ready/total, control plane health, backups, and
the fleet's machine count) and the form that creates a cluster from machine classes."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from herder.resources import Resource
from herder.web.caller import Caller
from herder.web.csrf import Form
from herder.web.pages import revision
from herder.web.site import Web
from herder.web.views import integer, one

NAMESPACE = "default"
DEFAULT_TALOS = "v1.13.9"
DEFAULT_KUBERNETES = "1.33.0"
CLUSTER_LABEL = "herder.dev/cluster"


def new_object(
    kind: str, name: str, spec: dict[str, object], labels: dict[str, str] | None = None
) -> Resource:
    return Resource.model_validate(
        {
            "apiVersion": "herder.dev/v1alpha1",
            "kind": kind,
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels or {}},
            "spec": spec,
        }
    )


def routes(web: Web) -> list[BaseRoute]:
    async def clusters(request: Request, caller: Caller) -> Response:
        listed = await caller.client.list("clusters", NAMESPACE)
        health = await caller.client.list("controlplanestatuses", NAMESPACE)
        machines = await caller.client.list("machines", NAMESPACE)
        free = sum(1 for m in machines.items if CLUSTER_LABEL not in m.metadata.labels)
        context = {
            "clusters": sorted(listed.items, key=lambda c: c.name),
            "health": {s.name: s for s in health.items},
            "machines": len(machines.items),
            "free": free,
            "watch": ["clusters", "controlplanestatuses", "machines"],
            "rv": revision(listed, health, machines),
        }
        return web.render(request, "clusters.html", context, caller=caller)

    async def new(request: Request, caller: Caller) -> Response:
        if refused := web.refusal(request, caller, "create", "Cluster"):
            return refused
        classes = await caller.client.list("machineclasses", NAMESPACE)
        context = {
            "classes": sorted(c.name for c in classes.items),
            "talos": DEFAULT_TALOS,
            "kubernetes": DEFAULT_KUBERNETES,
        }
        return web.render(request, "cluster_new.html", context, caller=caller)

    async def create(request: Request, caller: Caller, form: Form) -> Response:
        name = one(form, "name")
        control_planes = integer(one(form, "controlPlanes"), "controlPlanes", minimum=1, maximum=7)
        workers = integer(one(form, "workers"), "workers", maximum=1000)
        cluster = new_object(
            "Cluster",
            name,
            {"talosVersion": one(form, "talosVersion"), "kubernetesVersion": one(form, "kubernetesVersion")},
        )
        labels = {CLUSTER_LABEL: name}
        sets = [
            new_object(
                "MachineSet",
                f"{name}-control-planes",
                {
                    "role": "controlplane",
                    "machineClass": {"name": one(form, "controlPlaneClass"), "size": control_planes},
                },
                labels,
            )
        ]
        if workers:
            sets.append(
                new_object(
                    "MachineSet",
                    f"{name}-workers",
                    {"role": "worker", "machineClass": {"name": one(form, "workerClass"), "size": workers}},
                    labels,
                )
            )
        await caller.client.create(cluster)
        for machine_set in sets:
            await caller.client.create(machine_set)
        return web.done(request, f"/clusters/{name}", f"cluster {name} created")

    return [
        Route("/clusters", web.page(clusters), methods=["GET"]),
        Route("/clusters/new", web.page(new), methods=["GET"]),
        Route("/clusters", web.form(create), methods=["POST"]),
    ]
