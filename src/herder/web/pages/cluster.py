"""The Cluster page: its machine sets and their machines (stage, versions), conditions with reasons,
recent Events, rollouts in progress, and what may be done to it: upgrade Talos or Kubernetes, scale a
machine set, download its kubeconfig, talosconfig or support bundle, export its template, take a backup,
delete it.

The kubeconfig a person downloads reaches the cluster through herder's proxy as them: its user is the exec
plugin ``herder auth exec-credential``, which their ``herder login`` keeps signed in, so it holds no token
and access ends when theirs does. Someone signed in with a token uses ``herder cluster kubeconfig``
instead (the page says so): a token is shown once, never handed out again in a download. Admins also get
the break-glass kubeconfig, the cluster's own admin credentials (audited, and marked on the cluster).

The versions offered for an upgrade are candidates (the next patches of the running minor, the next two
minors) that herder's version policy (``herder.talos.versions``, which the cluster admission applies)
allows for this cluster. Not dry runs through the API: each would be an audited write, and a page that
refreshes live would fill the audit log. Whatever is chosen is still checked by the API when sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from herder.client.errors import NotFound
from herder.client.kubeconfig import proxy_kubeconfig
from herder.client.sign_in import exec_user
from herder.resources import Resource
from herder.talos.versions import check_kubernetes_upgrade, check_talos_upgrade
from herder.templates.export import Unexportable, export_template
from herder.web.caller import Caller
from herder.web.csrf import Form
from herder.web.pages import revision
from herder.web.pages.clusters import CLUSTER_LABEL, NAMESPACE
from herder.web.sessions import Session
from herder.web.site import SECURITY_HEADERS, Web, origin
from herder.web.views import BadInput, integer, one

SET_LABEL = "herder.dev/machine-set"
RECENT_EVENTS = 20
# The candidate versions tried for an upgrade: patches ahead in the running minor, and minors ahead.
PATCHES_AHEAD = 3
MINORS_AHEAD = 2
VERSION_FIELDS = {"talos": "talosVersion", "kubernetes": "kubernetesVersion"}


def candidates(current: str) -> list[str]:
    """Versions an upgrade from ``current`` might go to, nearest first, spelled as ``current`` is."""
    prefix = "v" if current.startswith("v") else ""
    try:
        major, minor, patch = (int(part) for part in current.lstrip("v").split("-")[0].split("."))
    except ValueError:
        return []
    out = [f"{prefix}{major}.{minor}.{patch + step}" for step in range(1, PATCHES_AHEAD + 1)]
    out += [f"{prefix}{major}.{minor + step}.0" for step in range(1, MINORS_AHEAD + 1)]
    return out


def allowed_versions(cluster: Resource) -> dict[str, list[str]]:
    """The candidate Talos and Kubernetes versions the version policy allows ``cluster`` to move to,
    checked as the cluster admission checks a change of each."""
    spec = cluster.spec or {}
    talos, kubernetes = str(spec.get("talosVersion", "")), str(spec.get("kubernetesVersion", ""))
    initial = (cluster.status or {}).get("initialTalosVersion") or talos
    return {
        "talos": [
            v
            for v in candidates(talos)
            if check_talos_upgrade(talos, v, initial=initial, kubernetes=kubernetes)
        ],
        "kubernetes": [
            v for v in candidates(kubernetes) if check_kubernetes_upgrade(kubernetes, v, talos=[talos])
        ],
    }


async def _gather(caller: Caller, name: str) -> dict[str, Any]:
    cluster = await caller.client.get("clusters", name, NAMESPACE)
    selector = f"{CLUSTER_LABEL}={name}"
    sets, members, backups = await asyncio.gather(
        caller.client.list("machinesets", NAMESPACE, label_selector=selector),
        caller.client.list("clustermachines", NAMESPACE, label_selector=selector),
        caller.client.list("etcdbackups", NAMESPACE, label_selector=selector),
    )
    involved = [name, *(s.name for s in sets.items)]
    events = await asyncio.gather(
        *(
            caller.client.list("events", NAMESPACE, field_selector=f"involvedObject.name={who}")
            for who in involved
        )
    )
    health = None
    with contextlib.suppress(NotFound):
        health = await caller.client.get("controlplanestatuses", name, NAMESPACE)
    recent = sorted(
        (e for listed in events for e in listed.items),
        key=lambda e: str(getattr(e, "lastTimestamp", "") or ""),
        reverse=True,
    )[:RECENT_EVENTS]
    by_set: dict[str, list[Resource]] = {}
    for member in sorted(members.items, key=lambda m: m.name):
        by_set.setdefault(member.metadata.labels.get(SET_LABEL, ""), []).append(member)
    return {
        "cluster": cluster,
        "sets": sorted(sets.items, key=lambda s: ((s.spec or {}).get("role") != "controlplane", s.name)),
        "members": by_set,
        "events": recent,
        "backups": sorted(backups.items, key=lambda b: b.name, reverse=True)[:5],
        "health": health,
        "rv": revision(sets, members, backups, *events),
    }


def routes(web: Web) -> list[BaseRoute]:
    async def show(request: Request, caller: Caller) -> Response:
        name = request.path_params["name"]
        context = await _gather(caller, name)
        cluster = context["cluster"]
        context["rv"] = str(max(int(context["rv"]), cluster.resource_version))
        upgrades = allowed_versions(cluster) if caller.can("update", "Cluster", cluster) else {}
        session: Session = request.state.session
        context.update(
            upgrades=upgrades,
            signed_in_by_provider=bool(session.id_token),
            watch=["clusters", "machinesets", "clustermachines", "events", "controlplanestatuses"],
        )
        return web.render(request, "cluster.html", context, caller=caller)

    async def upgrade(request: Request, caller: Caller, form: Form) -> Response:
        name = request.path_params["name"]
        what = one(form, "component")
        field = VERSION_FIELDS.get(what)
        if field is None:
            raise BadInput(f"component: {what!r} is neither talos nor kubernetes")
        version = one(form, "version")
        await caller.client.patch("clusters", name, {"spec": {field: version}}, NAMESPACE)
        label = "Talos" if what == "talos" else "Kubernetes"
        return web.done(request, f"/clusters/{name}", f"{label} upgrade of {name} to {version} started")

    async def scale(request: Request, caller: Caller, form: Form) -> Response:
        name = request.path_params["name"]
        size = integer(one(form, "size"), "size", maximum=1000)
        machine_set = await caller.client.get("machinesets", one(form, "machineSet"), NAMESPACE)
        if machine_set.metadata.labels.get(CLUSTER_LABEL) != name:
            raise BadInput(f"machineSet: {machine_set.name} is not a machine set of cluster {name}")
        if not (machine_set.spec or {}).get("machineClass"):
            raise BadInput(
                f"machineSet: {machine_set.name} lists its machines; only a class-allocated set scales"
            )
        patch = {"spec": {"machineClass": {"size": size}}}
        await caller.client.patch("machinesets", machine_set.name, patch, NAMESPACE)
        return web.done(request, f"/clusters/{name}", f"{machine_set.name} scaled to {size}")

    async def kubeconfig(request: Request, caller: Caller, form: Form) -> Response:
        name = request.path_params["name"]
        session: Session = request.state.session
        if not session.id_token:
            raise BadInput(
                f"signed in with a token: run herder cluster kubeconfig {name} with your token's kubeconfig"
            )
        await caller.client.get("clusters", name, NAMESPACE)  # it exists, and you may see it
        server = origin(request)
        body = proxy_kubeconfig(server, web.ca_pem, name, NAMESPACE, exec_user(server, "herder"))
        disposition = f'attachment; filename="{name}.kubeconfig"'
        headers = {**SECURITY_HEADERS, "Content-Disposition": disposition}
        return Response(body, 200, media_type="application/yaml", headers=headers)

    def download(action: str, suffix: str = "", media_type: str = "application/yaml") -> Any:
        async def run(request: Request, caller: Caller, form: Form) -> Response:
            name = request.path_params["name"]
            body = await caller.client.run_action("clusters", name, action, {}, NAMESPACE, timeout=120)
            disposition = f'attachment; filename="{name}{suffix or "." + action}"'
            headers = {**SECURITY_HEADERS, "Content-Disposition": disposition}
            return Response(body, 200, media_type=media_type, headers=headers)

        return run

    async def template(request: Request, caller: Caller, form: Form) -> Response:
        name = request.path_params["name"]
        context = await _gather(caller, name)
        selector = f"{CLUSTER_LABEL}={name}"
        nodes, patches = await asyncio.gather(
            caller.client.list("machinesetnodes", NAMESPACE, label_selector=selector),
            caller.client.list("configpatches", NAMESPACE, label_selector=selector),
        )
        try:
            text = export_template(context["cluster"], [*context["sets"], *nodes.items, *patches.items])
        except Unexportable as exc:
            return web.failure(
                request, 409, f"cluster {name} cannot be exported as a template: {exc}", caller=caller
            )
        headers = {**SECURITY_HEADERS, "Content-Disposition": f'attachment; filename="{name}.template.yaml"'}
        return Response(text, 200, media_type="application/yaml", headers=headers)

    async def backup(request: Request, caller: Caller, form: Form) -> Response:
        name = request.path_params["name"]
        await caller.client.run_action("clusters", name, "backup", {}, NAMESPACE)
        return web.done(request, f"/clusters/{name}", f"a backup of {name} was requested")

    async def confirm_delete(request: Request, caller: Caller) -> Response:
        context = await _gather(caller, request.path_params["name"])
        if refused := web.refusal(request, caller, "delete", "Cluster", context["cluster"]):
            return refused
        context["machine_count"] = sum(len(m) for m in context["members"].values())
        return web.render(request, "cluster_delete.html", context, caller=caller)

    async def delete(request: Request, caller: Caller, form: Form) -> Response:
        name = request.path_params["name"]
        if one(form, "confirm") != name:
            raise BadInput(f"confirm: type the cluster's name, {name}, to delete it")
        await caller.client.delete("clusters", name, NAMESPACE)
        return web.done(request, "/clusters", f"cluster {name} is being deleted")

    return [
        Route("/clusters/{name}", web.page(show), methods=["GET"]),
        Route("/clusters/{name}/upgrade", web.form(upgrade), methods=["POST"]),
        Route("/clusters/{name}/scale", web.form(scale), methods=["POST"]),
        Route("/clusters/{name}/kubeconfig", web.form(kubeconfig), methods=["POST"]),
        Route(
            "/clusters/{name}/kubeconfig-break-glass",
            web.form(download("kubeconfig", "-break-glass.kubeconfig")),
            methods=["POST"],
        ),
        Route("/clusters/{name}/talosconfig", web.form(download("talosconfig")), methods=["POST"]),
        Route(
            "/clusters/{name}/support",
            web.form(download("support", "-support.zip", "application/zip")),
            methods=["POST"],
        ),
        Route("/clusters/{name}/template", web.form(template), methods=["POST"]),
        Route("/clusters/{name}/backup", web.form(backup), methods=["POST"]),
        Route("/clusters/{name}/delete", web.page(confirm_delete), methods=["GET"]),
        Route("/clusters/{name}/delete", web.form(delete), methods=["POST"]),
    ]
