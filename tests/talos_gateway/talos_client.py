"""A Talos API client that is not herder's: Python bindings generated here, with grpcio-tools, from Talos's
own ``machine.proto``, ``storage.proto`` and resource definitions (tests/data/talos/proto), and plain grpc
with the talosconfig's certificate. It calls every read-only call of the machine API and the storage API's
``Disks`` on a node, reads the resources
``talosctl get`` and ``talosctl dashboard`` read (Get, List and Watch of the resource API), and prints, as
one JSON object, what it decoded.

The resource API's envelope is COSI's (``cosi.resource.State``), which Talos's protos import rather than
hold; its messages are taken from herder's transcription of COSI's specification, under the path COSI gives
them. Every spec is decoded with Talos's own message for its type, and its YAML read as talosctl prints it.

Run as a program (``python talos_client.py PROTOS WORKDIR TALOSCONFIG CONTROL_PLANE WORKER``), never
imported next to herder: Talos's protos and herder's declare the same names, which one process cannot
hold twice.
"""

from __future__ import annotations

import base64
import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import grpc_tools
import yaml
from google.protobuf import empty_pb2, json_format

COSI = Path(__file__).parents[2] / "src/herder/talos/api/cosi"
DEFINITIONS = ("cluster", "enums", "extensions", "network", "runtime", "v1alpha1")


def _cosi_envelope(out: Path) -> Path:
    """COSI's resource and state messages as ``cosi/resource.proto`` and ``cosi/state.proto``."""
    root = out / "cosi-protos"
    (root / "cosi").mkdir(parents=True, exist_ok=True)
    for name in ("resource", "state"):
        text = (COSI / f"{name}.proto").read_text()
        (root / "cosi" / f"{name}.proto").write_text(
            text.replace('import "herder/talos/api/cosi/', 'import "cosi/')
        )
    return root


def _bindings(protos: Path, out: Path) -> tuple[Any, Any, Any]:
    out.mkdir(parents=True, exist_ok=True)
    includes = Path(grpc_tools.__file__).parent / "_proto"
    cosi = _cosi_envelope(out)
    definitions = [f"resource/definitions/{d}/{d}.proto" for d in DEFINITIONS]
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{protos}", f"-I{cosi}", f"-I{includes}",
         f"--python_out={out}", f"--grpc_python_out={out}", "machine/machine.proto", "common/common.proto",
         "storage/storage.proto", "google/rpc/status.proto", "cosi/resource.proto", "cosi/state.proto",
         *definitions],
        check=True,
    )  # fmt: skip
    # Talos's definitions are the package ``resource``, as Python's own module is named: a regular package
    # first on the path is found before it (and the module, if something imported it, forgotten).
    for package in [out / "resource", *(out / "resource").rglob("*")]:
        if package.is_dir():
            (package / "__init__.py").touch()
    sys.modules.pop("resource", None)
    sys.path.insert(0, str(out))
    machine = importlib.import_module("machine.machine_pb2")
    grpc_stubs = importlib.import_module("machine.machine_pb2_grpc")
    common = importlib.import_module("common.common_pb2")
    return machine, grpc_stubs, common


def _channel(talosconfig: Path) -> grpc.Channel:
    config = yaml.safe_load(talosconfig.read_text())
    context = config["contexts"][config["context"]]
    credentials = grpc.ssl_channel_credentials(
        root_certificates=base64.b64decode(context["ca"]),
        private_key=base64.b64decode(context["key"]),
        certificate_chain=base64.b64decode(context["crt"]),
    )
    return grpc.secure_channel(context["endpoints"][0], credentials)


def main() -> None:
    protos, workdir, talosconfig, cp, worker = sys.argv[1:6]
    pb, pb_grpc, common = _bindings(Path(protos), Path(workdir))
    stub = pb_grpc.MachineServiceStub(_channel(Path(talosconfig)))
    storage = importlib.import_module("storage.storage_pb2_grpc").StorageServiceStub(
        _channel(Path(talosconfig))
    )
    on_cp, on_worker = (("node", cp),), (("node", worker),)
    empty = empty_pb2.Empty()

    def first(reply: Any) -> Any:
        (message,) = reply.messages
        assert not message.metadata.error, message.metadata.error
        return message

    def plain(message: Any) -> Any:
        return json_format.MessageToDict(message, preserving_proto_field_name=True)

    def stream(call: Any, request: Any, metadata: Any, limit: int | None = None) -> list[Any]:
        got = []
        responses = call(request, metadata=metadata, timeout=30)
        for response in responses:
            got.append(response)
            if limit is not None and len(got) >= limit:
                responses.cancel()
                break
        return got

    seen: dict[str, Any] = {
        "hostname": first(stub.Hostname(empty, metadata=on_cp, timeout=30)).hostname,
        "version": first(stub.Version(empty, metadata=on_cp, timeout=30)).version.tag,
        "memory": [plain(first(stub.Memory(empty, metadata=on_cp, timeout=30)).meminfo) for _ in range(2)],
        "loadavg": plain(first(stub.LoadAvg(empty, metadata=on_cp, timeout=30))),
        "processes": [plain(p) for p in first(stub.Processes(empty, metadata=on_cp, timeout=30)).processes],
        "systemstat": plain(first(stub.SystemStat(empty, metadata=on_cp, timeout=30))),
        "cpuinfo": [plain(c) for c in first(stub.CPUInfo(empty, metadata=on_cp, timeout=30)).cpu_info],
        "diskstats": plain(first(stub.DiskStats(empty, metadata=on_cp, timeout=30))),
        "disks": [plain(d) for d in first(storage.Disks(empty, metadata=on_cp, timeout=30)).disks],
        "netdev": plain(first(stub.NetworkDeviceStats(empty, metadata=on_cp, timeout=30))),
        "mounts": [plain(m) for m in first(stub.Mounts(empty, metadata=on_cp, timeout=30)).stats],
        "containers": [
            plain(c)
            for c in first(
                stub.Containers(
                    pb.ContainersRequest(namespace="k8s.io", driver=common.CRI), metadata=on_cp, timeout=30
                )
            ).containers
        ],
        "stats": [
            plain(s)
            for s in first(
                stub.Stats(
                    pb.StatsRequest(namespace="system", driver=common.CONTAINERD), metadata=on_cp, timeout=30
                )
            ).stats
        ],
        "netstat": [
            plain(r)
            for r in first(
                stub.Netstat(
                    pb.NetstatRequest(
                        filter=pb.NetstatRequest.LISTENING, feature=pb.NetstatRequest.Feature(pid=True)
                    ),
                    metadata=on_cp,
                    timeout=30,
                )
            ).connectrecord
        ],
        "etcd_status": plain(first(stub.EtcdStatus(empty, metadata=on_cp, timeout=30)).member_status),
        "etcd_alarms": plain(first(stub.EtcdAlarmList(empty, metadata=on_cp, timeout=30))),
        "etcd_members": [
            plain(m)
            for m in first(
                stub.EtcdMemberList(pb.EtcdMemberListRequest(), metadata=on_cp, timeout=30)
            ).members
        ],
        "services": [s.id for s in first(stub.ServiceList(empty, metadata=on_worker, timeout=30)).services],
        "logs_tail": b"".join(
            d.bytes
            for d in stream(
                stub.Logs, pb.LogsRequest(namespace="system", id="kubelet", tail_lines=1), on_worker
            )
        ).decode(),
        "logs_follow": [
            d.bytes.decode()
            for d in stream(
                stub.Logs,
                pb.LogsRequest(namespace="system", id="machined", follow=True, tail_lines=3),
                on_cp,
                1,
            )
        ],
        "dmesg": [d.bytes.decode() for d in stream(stub.Dmesg, pb.DmesgRequest(), on_worker)],
        "dmesg_follow": [
            d.bytes.decode() for d in stream(stub.Dmesg, pb.DmesgRequest(follow=True), on_worker, 2)
        ],
        "read": len(
            b"".join(
                d.bytes
                for d in stream(stub.Read, pb.ReadRequest(path="/usr/bin/containerd-shim-runc-v2"), on_cp)
            )
        ),
        "read_hostname": b"".join(
            d.bytes for d in stream(stub.Read, pb.ReadRequest(path="/etc/hostname"), on_cp)
        ).decode(),
        "list": [f.name for f in stream(stub.List, pb.ListRequest(root="/etc"), on_cp)],
        "usage": {u.name: u.size for u in stream(stub.DiskUsage, pb.DiskUsageRequest(paths=["/usr"]), on_cp)},
        "events": [e.data.type_url for e in stream(stub.Events, pb.EventsRequest(tail_events=3), on_cp, 3)],
    }
    seen["resources"] = _resources(grpc_stubs_of_state(), _channel(Path(talosconfig)), cp, worker)
    print(json.dumps(seen))


def grpc_stubs_of_state() -> tuple[Any, Any]:
    return importlib.import_module("cosi.state_pb2"), importlib.import_module("cosi.state_pb2_grpc")


# What talosctl get and the dashboard read: (namespace, type, Talos's message of its spec).
READ = {
    "members": ("cluster", "Members.cluster.talos.dev", "cluster.MemberSpec"),
    "addresses": ("network", "NodeAddresses.net.talos.dev", "network.NodeAddressSpec"),
    "routes": ("network", "RouteStatuses.net.talos.dev", "network.RouteStatusSpec"),
    "links": ("network", "LinkStatuses.net.talos.dev", "network.LinkStatusSpec"),
    "hostname": ("network", "HostnameStatuses.net.talos.dev", "network.HostnameStatusSpec"),
    "services": ("runtime", "Services.v1alpha1.talos.dev", "v1alpha1.ServiceSpec"),
    "machinestatus": ("runtime", "MachineStatuses.runtime.talos.dev", "runtime.MachineStatusSpec"),
    "extensions": ("runtime", "ExtensionStatuses.runtime.talos.dev", "extensions.Layer"),
}


def _resources(state: tuple[Any, Any], channel: grpc.Channel, cp: str, worker: str) -> dict[str, Any]:
    """Each type's resources on the control plane (List), decoded: id, the spec by Talos's message, and
    the YAML; one Get and the first event of a Watch of the machine's status on the worker."""
    pb, pb_grpc = state
    stub = pb_grpc.StateStub(channel)
    on_cp, on_worker = (("node", cp),), (("node", worker),)  # one-to-one: a node, not nodes

    def decoded(resource: Any, message: str) -> dict[str, Any]:
        package, name = message.split(".")
        module = importlib.import_module(f"resource.definitions.{package}.{package}_pb2")
        spec = getattr(module, name).FromString(resource.spec.proto_spec)
        return {
            "id": resource.metadata.id,
            "type": resource.metadata.type,
            "version": resource.metadata.version,
            "proto": json_format.MessageToDict(spec, preserving_proto_field_name=True),
            "yaml": yaml.safe_load(resource.spec.yaml_spec),
        }

    seen: dict[str, Any] = {}
    for key, (namespace, type_, message) in READ.items():
        listed = stub.List(pb.ListRequest(namespace=namespace, type=type_), metadata=on_cp, timeout=30)
        seen[key] = [decoded(r.resource, message) for r in listed]
    got = stub.Get(
        pb.GetRequest(namespace="runtime", type=READ["machinestatus"][1], id="machine"),
        metadata=on_worker,
        timeout=30,
    )
    seen["get_worker_status"] = decoded(got.resource, READ["machinestatus"][2])
    watch = stub.Watch(
        pb.WatchRequest(namespace="runtime", type=READ["machinestatus"][1], id="machine", api_version=1),
        metadata=on_worker,
        timeout=30,
    )
    for response in watch:
        if response.event:  # the first message only says the watch is set up
            (event,) = response.event
            seen["watch_first"] = {
                "event": pb.EventType.Name(event.event_type),
                **decoded(event.resource, READ["machinestatus"][2]),
            }
            watch.cancel()
            break
    return seen


if __name__ == "__main__":
    main()
