"""The AWS provider run against herder as an operator runs it (``herder serve --provider cloud=aws``,
its config sealed in herder and checked against the schema it publishes), with moto's EC2 short of
capacity: the request shows AWS's message as its last error, kept across retries with the attempt count,
and goes cleanly when deleted (nothing was launched). The request never gets an instance, so herder never
connects to an address moto hands out."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.server import Server, running
from tests.providers.ec2_server import CAPACITY, REGION, Ec2Server
from tests.provisioning.provider_site import condition


@pytest.fixture(scope="module")
def ec2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ec2Server]:
    server = Ec2Server(tmp_path_factory.mktemp("aws-ec2")).start_serving()
    try:
        yield server
    finally:
        server.stop()


def _kubectl(server: Server, *args: str) -> Any:
    done = server.run("kubectl", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if "-o" in args and "json" in args else done.stdout


def _until(check: Any, timeout: float = 60, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_capacity_error_is_kept_on_the_request_across_retries(ec2: Ec2Server, tmp_path: Path) -> None:
    client = ec2.ec2()
    vpc = client.create_vpc(CidrBlock="10.30.0.0/16")["Vpc"]["VpcId"]
    subnet = client.create_subnet(VpcId=vpc, CidrBlock="10.30.1.0/24")["Subnet"]["SubnetId"]
    image = client.register_image(Name="talos-v1.13.9", RootDeviceName="/dev/xvda")["ImageId"]
    config = {
        "region": REGION,
        "endpoint": ec2.endpoint,
        "accessKeyID": "testing",
        "secretAccessKey": "moto-secret-of-the-test",
        "subnetID": subnet,
        "amis": {"v1.13.9": image},
    }
    config_file = tmp_path / "cloud.yaml"
    config_file.write_text(json.dumps(config))
    ec2.fail("RunInstances", "InsufficientInstanceCapacity", CAPACITY, status=500)
    with running(tmp_path / "server", "--provider", "cloud=aws") as server:
        created = server.run("herder", "infraprovider", "create", "cloud", "--config", str(config_file))
        assert created.returncode == 0, created.stderr
        _until(
            lambda: (
                condition(_kubectl(server, "get", "infraprovider", "cloud", "-o", "json"), "Ready").get(
                    "status"
                )
                == "True"
            ),
            what="provider cloud Ready",
        )
        published = _kubectl(server, "get", "infraprovider", "cloud", "-o", "json")["status"]
        assert "subnetID" in published["configSchema"]["properties"]
        assert "instanceType" in published["schema"]["properties"]
        request_set = {
            "apiVersion": "herder.dev/v1alpha1",
            "kind": "MachineRequestSet",
            "metadata": {"name": "capacity", "namespace": "default"},
            "spec": {
                "providerID": "cloud",
                "machineCount": 1,
                "talosVersion": "v1.13.9",
                "providerData": {"instanceType": "t3.small"},
            },
        }
        path = tmp_path / "set.json"
        path.write_text(json.dumps(request_set))
        _kubectl(server, "apply", "-f", str(path))

        def failing_again() -> dict[str, Any] | None:
            items = _kubectl(server, "get", "machinerequests", "-o", "json")["items"]
            status = (items[0].get("status") or {}) if items else {}
            return status if int(status.get("attempts") or 0) >= 2 else None

        status = _until(failing_again, timeout=90, what="two failed attempts")
        assert status["stage"] == "Provisioning" and status["step"] == "launch"
        assert status["lastError"]["message"] == (
            f"EC2 RunInstances: InsufficientInstanceCapacity: {CAPACITY}; AWS is short of capacity or a quota: retried"
        )
        assert "moto-secret-of-the-test" not in json.dumps(status)
        instances = client.describe_instances()["Reservations"]
        assert not instances

        _kubectl(server, "delete", "machinerequestset", "capacity")
        _until(
            lambda: not _kubectl(server, "get", "machinerequests", "-o", "json")["items"],
            what="the request gone",
        )
    ec2.clear()
