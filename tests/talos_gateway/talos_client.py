"""A Talos API client that is not herder's: Python bindings generated here, with grpcio-tools, from Talos's
own ``machine.proto`` (tests/data/talos/proto), and plain grpc with the talosconfig's certificate. It calls
every read-only call of the machine API on a node and prints, as one JSON object, what it decoded.

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


def _bindings(protos: Path, out: Path) -> tuple[Any, Any, Any]:
    out.mkdir(parents=True, exist_ok=True)
    includes = Path(grpc_tools.__file__).parent / "_proto"
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{protos}", f"-I{includes}", f"--python_out={out}",
         f"--grpc_python_out={out}", "machine/machine.proto", "common/common.proto", "google/rpc/status.proto"],
        check=True,
    )  # fmt: skip
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
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
