#!/usr/bin/env python3
"""A herder infra provider in Python, written from docs/providers.md alone, with the official `kubernetes`
client and no herder code: it makes a machine in a cloud for every MachineRequest labelled with its id,
and destroys it once the request goes and herder has released it.

Its cloud is the Talos emulator's control API (what `herder emu cloud-fault` makes fail): `POST /machines`
makes a machine, `GET` and `DELETE /machines/UUID` find and destroy one. A real provider would call its
cloud's API in `cloud_create`, `cloud_exists` and `cloud_destroy` instead.

    KUBECONFIG=provider.kubeconfig PROVIDER_ID=pycloud CLOUD=http://127.0.0.1:50080 python3 provider.py
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

PROVIDER_ID = os.environ.get("PROVIDER_ID", "pycloud")
CLOUD = os.environ.get("CLOUD", "http://127.0.0.1:50080").rstrip("/")
HEARTBEAT = float(os.environ.get("HEARTBEAT_SECONDS", "2"))
RESYNC = int(os.environ.get("RESYNC_SECONDS", "5"))  # how often every request is looked at again
MAX_ATTEMPTS = 5

GROUP, VERSION = "herder.dev", "v1alpha1"
SELECTOR = f"herder.dev/infra-provider-id={PROVIDER_ID}"
MINE = "herder.dev/infra-provider"  # this provider's finalizer on its requests
HERDERS = "herder.dev/machine-release"  # herder's: gone once herder has released the machine
# The JSON schema of the requests' providerData, published on the InfraProvider's status.
SCHEMA = {
    "type": "object",
    "properties": {
        "cpus": {"type": "integer", "minimum": 1},
        "memoryMiB": {"type": "integer", "minimum": 512},
        "diskGiB": {"type": "integer", "minimum": 1},
    },
    "additionalProperties": False,
}

api: client.CustomObjectsApi
not_before: dict[tuple[str, str], float] = {}  # requests backing off after a failed attempt
written: dict[tuple[str, str], int] = {}  # the resourceVersion of each request's last write by us


def log(message: str) -> None:
    print(f"{datetime.now(UTC):%H:%M:%S} provider {PROVIDER_ID}: {message}", file=sys.stderr, flush=True)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the cloud ---


class CloudError(Exception):
    pass


def cloud(method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(CLOUD + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")
    except OSError as exc:
        raise CloudError(f"cannot reach the cloud at {CLOUD}: {exc}") from None


def cloud_create(machine: str, talos_version: str, data: dict[str, Any]) -> dict[str, Any]:
    """The machine of that UUID, made if it is not there yet (so that an attempt after a crash adopts it)."""
    code, found = cloud("GET", f"/machines/{machine}")
    if code == 200:
        return dict(found)
    hardware = {"cpus": data.get("cpus", 2), "memory_mib": data.get("memoryMiB", 2048)}
    hardware["disk_gib"] = data.get("diskGiB", 10)
    body = {"count": 1, "uuid": machine, "talos_version": talos_version, "hardware": hardware}
    code, made = cloud("POST", "/machines", body)
    if code != 201:
        raise CloudError(f"creating machine {machine}: {made.get('error', code)}")
    return dict(made[0])


def cloud_exists(machine: str) -> bool:
    code, _ = cloud("GET", f"/machines/{machine}")
    if code not in (200, 404):
        raise CloudError(f"looking for machine {machine}: answered {code}")
    return code == 200


def cloud_destroy(machine: str) -> None:
    code, answer = cloud("DELETE", f"/machines/{machine}")
    if code not in (200, 404):  # a machine already gone counts as destroyed
        raise CloudError(f"destroying machine {machine}: {answer.get('error', code)}")


# --- herder ---


def heartbeats() -> None:
    """The provider's own fields of its InfraProvider's status, as a merge patch: herder's conditions stay."""
    while True:
        status = {
            "lastHeartbeat": now(),
            "heartbeatIntervalSeconds": HEARTBEAT,
            "version": "1.0.0",
            "schema": SCHEMA,
        }
        try:
            api.patch_cluster_custom_object_status(
                GROUP, VERSION, "infraproviders", PROVIDER_ID, {"status": status}
            )
        except ApiException as exc:
            log(f"heartbeat failed: {exc.status} {exc.reason}")
        time.sleep(HEARTBEAT)


def write_status(request: dict[str, Any], fields: dict[str, Any]) -> None:
    """A merge patch of the request's status: the fields given change, the others stay (None removes one)."""
    meta = request["metadata"]
    updated = api.patch_namespaced_custom_object_status(
        GROUP, VERSION, meta["namespace"], "machinerequests", meta["name"], {"status": fields}
    )
    written[(meta["namespace"], meta["name"])] = int(updated["metadata"]["resourceVersion"])


def set_finalizers(request: dict[str, Any], finalizers: list[str]) -> bool:
    """Replace the request's finalizers, conditionally on the resourceVersion read; False on a conflict
    (the newer request comes by the watch)."""
    meta = request["metadata"]
    change = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
    try:
        api.patch_namespaced_custom_object(
            GROUP, VERSION, meta["namespace"], "machinerequests", meta["name"], change
        )
    except ApiException as exc:
        if exc.status in (404, 409):
            return False
        raise
    return True


def machine_of(request: dict[str, Any]) -> str:
    """The UUID of the request's machine: derived from the request's uid, the same on every attempt."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"herder-request:{request['metadata']['uid']}"))


def failed_attempt(request: dict[str, Any], status: dict[str, Any], error: str) -> None:
    """Keep the error and count the attempt (never wiped by a retry); try again later, or give up."""
    meta = request["metadata"]
    attempts = int(status.get("attempts") or 0) + 1
    fields: dict[str, Any] = {"lastError": {"message": error, "time": now()}, "attempts": attempts}
    if attempts >= MAX_ATTEMPTS and not meta.get("deletionTimestamp"):
        fields.update(
            stage="Failed", reason="ProvisioningFailed", message=f"gave up after {attempts} attempts"
        )
    else:
        delay = min(2.0**attempts, 30.0)
        not_before[(meta["namespace"], meta["name"])] = time.monotonic() + delay
        fields["message"] = f"attempt {attempts} failed; trying again in {delay:g}s"
    write_status(request, fields)
    log(f"{meta['name']}: {error}")


def provision(request: dict[str, Any], status: dict[str, Any]) -> None:
    spec, machine = request.get("spec") or {}, machine_of(request)
    if status.get("stage") != "Provisioning":
        write_status(
            request,
            {
                "stage": "Provisioning",
                "step": "create",
                "stepNumber": 1,
                "steps": 1,
                "message": f"creating machine {machine}",
            },
        )
    try:
        made = cloud_create(machine, spec.get("talosVersion", ""), spec.get("providerData") or {})
    except CloudError as exc:
        failed_attempt(request, status, str(exc))
        return
    # Done: the error of earlier attempts goes, and the machine is reported for herder to connect to.
    write_status(
        request,
        {
            "stage": "Provisioned",
            "message": f"machine {machine}",
            "lastError": None,
            "attempts": 0,
            "reason": "",
            "providerState": {"machine": machine},
            "machine": {"uuid": machine, "address": made["endpoint"]},
        },
    )
    log(f"{request['metadata']['name']}: provisioned machine {machine} at {made['endpoint']}")


def deprovision(request: dict[str, Any], status: dict[str, Any]) -> None:
    machine = (status.get("providerState") or {}).get("machine") or machine_of(request)
    try:
        cloud_destroy(machine)
    except CloudError as exc:
        failed_attempt(request, status, str(exc))
        return
    finalizers = request["metadata"].get("finalizers") or []
    if set_finalizers(request, [f for f in finalizers if f != MINE]):
        log(f"{request['metadata']['name']}: destroyed machine {machine}")


def handle(request: dict[str, Any]) -> None:
    meta, status = request["metadata"], request.get("status") or {}
    key = (meta["namespace"], meta["name"])
    if int(meta["resourceVersion"]) < written.get(key, 0):
        return  # an event of a state older than our own last write: the newer one follows
    if not_before.get(key, 0.0) > time.monotonic():
        return  # backing off: the resync brings it back
    finalizers = meta.get("finalizers") or []
    if meta.get("deletionTimestamp"):
        if MINE in finalizers and HERDERS not in finalizers:  # herder has released the machine
            deprovision(request, status)
        return
    if MINE not in finalizers:
        # Before anything is made for it: the provider's finalizer, beside whatever is there.
        set_finalizers(request, [*finalizers, MINE])
        return
    stage = status.get("stage") or "Pending"
    if stage == "Provisioned":
        machine = (status.get("machine") or {}).get("uuid", "")
        try:
            gone = not cloud_exists(machine)
        except CloudError as exc:
            log(f"{meta['name']}: {exc}")
            return
        if gone:
            write_status(
                request,
                {
                    "stage": "Failed",
                    "reason": "MachineGone",
                    "message": f"machine {machine} no longer exists: it was destroyed outside herder",
                },
            )
    elif stage != "Failed":
        provision(request, status)


def run() -> None:
    """List the provider's requests and handle each, then watch them from the list's revision; list again
    every RESYNC seconds (the watch's timeout) and whenever the watch cannot resume (410 Gone)."""
    while True:
        try:
            listed = api.list_cluster_custom_object(
                GROUP, VERSION, "machinerequests", label_selector=SELECTOR
            )
            for request in listed["items"]:
                handle(request)
            stream = watch.Watch().stream(
                api.list_cluster_custom_object,
                GROUP,
                VERSION,
                "machinerequests",
                label_selector=SELECTOR,
                resource_version=listed["metadata"]["resourceVersion"],
                timeout_seconds=RESYNC,
            )
            for event in stream:
                if event["type"] in ("ADDED", "MODIFIED"):
                    handle(event["object"])
        except ApiException as exc:
            if exc.status != 410:
                log(f"watching requests: {exc.status} {exc.reason}")
                time.sleep(1)
        except (OSError, CloudError) as exc:
            log(f"watching requests: {exc}")
            time.sleep(1)


def main() -> None:
    global api
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    config.load_kube_config()  # $KUBECONFIG: the provider's own, from `herder infraprovider create ID -o FILE`
    api = client.CustomObjectsApi()
    threading.Thread(target=heartbeats, daemon=True).start()
    log(f"making machines in {CLOUD} for requests labelled {SELECTOR}")
    run()


if __name__ == "__main__":
    main()
