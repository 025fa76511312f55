"""The AWS provider against moto's EC2 server on loopback, every call and error path: a launch makes one
instance of the request's AMI, type, disk and tags; a launch run again (a provider killed before it
recorded the instance) adopts it; AWS's capacity and quota errors fail the attempt with AWS's message and
a later attempt succeeds; destroying terminates it, and one already terminated (or never made) counts as
destroyed; an instance terminated behind herder's back no longer exists, nor one EC2 no longer knows
(InvalidInstanceID.NotFound), which counts as destroyed; power starts, stops and reboots.

No test connects to the addresses moto hands out: the ``identify`` step (Talos at the instance's address)
is tested against the emulator in ``test_maintenance.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from herder.infra import Fail, RequestContext
from herder.providers.aws import AWSConfig, AWSProvider, EC2Error
from herder.providers.aws.provider import UID_TAG
from tests.providers.ec2_server import CAPACITY, REGION, Ec2Server
from tests.providers.steps import context, run_step

AMI_NAME = "talos-v1.13.9-us-east-1-amd64"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ec2Server]:
    ec2 = Ec2Server(tmp_path_factory.mktemp("aws")).start_serving()
    try:
        yield ec2
    finally:
        ec2.stop()


@pytest.fixture(scope="module")
def network(server: Ec2Server) -> dict[str, str]:
    """What an operator sets up once: a VPC, a subnet, a security group and the Talos AMI."""
    ec2 = server.ec2()
    vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.20.1.0/24")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="talos", Description="Talos API", VpcId=vpc)["GroupId"]
    image = ec2.register_image(
        Name=AMI_NAME,
        Architecture="x86_64",
        RootDeviceName="/dev/xvda",
        VirtualizationType="hvm",
        BlockDeviceMappings=[{"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": 8}}],
    )["ImageId"]
    owner = ec2.describe_images(ImageIds=[image])["Images"][0]["OwnerId"]
    return {"subnet": subnet, "group": group, "image": image, "owner": owner}


@pytest.fixture(scope="module")
def provider() -> AWSProvider:
    """One provider for the module, as one process serves every request (one boto3 client)."""
    return AWSProvider()


async def _launched(provider: AWSProvider, config: AWSConfig) -> RequestContext[Any, Any]:
    """A new request whose ``launch`` step has run."""
    ctx = context(provider, config)
    await run_step(provider, ctx, "launch")
    return ctx


def _config(server: Ec2Server, network: dict[str, str], **changes: Any) -> AWSConfig:
    return AWSConfig.model_validate(
        {
            "region": REGION,
            "endpoint": server.endpoint,
            "accessKeyID": "testing",
            "secretAccessKey": "testing",
            "subnetID": network["subnet"],
            "securityGroupIDs": [network["group"]],
            "amis": {"v1.13.9": network["image"]},
            "instanceType": "t3.small",
            **changes,
        }
    )


def _instances(server: Ec2Server, uid: str) -> list[dict[str, Any]]:
    answer = server.ec2().describe_instances(Filters=[{"Name": f"tag:{UID_TAG}", "Values": [uid]}])
    return [i for r in answer["Reservations"] for i in r["Instances"]]


def _state(server: Ec2Server, instance_id: str) -> str:
    answer = server.ec2().describe_instances(InstanceIds=[instance_id])
    return str(answer["Reservations"][0]["Instances"][0]["State"]["Name"])


async def test_a_launch_makes_one_instance_of_the_requests_ami_type_disk_and_tags(
    server: Ec2Server, network: dict[str, str], provider: AWSProvider
) -> None:
    data = {"instanceType": "m5.large", "diskGiB": 40, "tags": {"team": "platform"}}
    ctx = context(provider, _config(server, network), name="workers-x1", data=data)
    await run_step(provider, ctx, "launch")
    await run_step(provider, ctx, "running")
    (instance,) = _instances(server, ctx.uid)
    assert ctx.state["instance"] == instance["InstanceId"]
    assert instance["ImageId"] == network["image"] and instance["InstanceType"] == "m5.large"
    assert instance["SubnetId"] == network["subnet"]
    # EC2 makes one instance per ClientToken: the request's uid, so a launch made again cannot make two.
    assert instance["ClientToken"] == ctx.uid
    assert [g["GroupId"] for g in instance["SecurityGroups"]] == [network["group"]]
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags == {
        "Name": "workers-x1",
        "team": "platform",
        UID_TAG: ctx.uid,
        "herder.dev/machine-request": "workers-x1",
        "herder.dev/infra-provider-id": "cloud",
    }
    volume_id = instance["BlockDeviceMappings"][0]["Ebs"]["VolumeId"]
    volume = server.ec2().describe_volumes(VolumeIds=[volume_id])["Volumes"][0]
    assert volume["Size"] == 40
    # Where herder will reach its Talos API: the instance's private address (never connected to here).
    assert ctx.state["address"] == instance["PrivateIpAddress"]


async def test_a_launch_run_again_adopts_the_instance_instead_of_making_a_second(
    server: Ec2Server, network: dict[str, str], provider: AWSProvider
) -> None:
    ctx = await _launched(provider, _config(server, network))
    made = ctx.state["instance"]
    # The provider was killed after RunInstances and before the runner recorded the instance.
    ctx.state.clear()
    await run_step(provider, ctx, "launch")
    assert ctx.state["instance"] == made
    assert [i["InstanceId"] for i in _instances(server, ctx.uid)] == [made]


async def test_capacity_and_quota_errors_fail_the_attempt_with_awss_message_then_a_later_one_works(
    server: Ec2Server, network: dict[str, str], provider: AWSProvider
) -> None:
    ctx = context(provider, _config(server, network))
    for code, message, status in (
        ("InsufficientInstanceCapacity", CAPACITY, 500),
        ("VcpuLimitExceeded", "You have requested more vCPU capacity than your current vCPU limit", 400),
    ):
        server.fail("RunInstances", code, message, status=status)
        try:
            with pytest.raises(EC2Error) as failed:
                await run_step(provider, ctx, "launch")
        finally:
            server.clear()
        assert failed.value.code == code
        assert (
            str(failed.value)
            == f"EC2 RunInstances: {code}: {message}; AWS is short of capacity or a quota: retried"
        )
        assert "instance" not in ctx.state and not _instances(server, ctx.uid)
    await run_step(provider, ctx, "launch")
    assert len(_instances(server, ctx.uid)) == 1


async def test_a_wrong_ami_or_subnet_says_what_to_fix(
    server: Ec2Server, network: dict[str, str], provider: AWSProvider
) -> None:
    ctx = context(provider, _config(server, network, amis={}), talos_version="v1.12.0")
    with pytest.raises(
        EC2Error, match=r"no AMI for Talos v1\.12\.0: set amis\['v1\.12\.0'\] or amiNamePattern"
    ):
        await run_step(provider, ctx, "launch")
    ctx = context(provider, _config(server, network, subnetID="subnet-0000dead"))
    with pytest.raises(EC2Error, match=r"EC2 RunInstances: InvalidSubnetID\.NotFound: .*subnet-0000dead"):
        await run_step(provider, ctx, "launch")


async def test_the_ami_is_looked_up_by_name_among_the_owners_accounts(
    server: Ec2Server, network: dict[str, str], provider: AWSProvider
) -> None:
    config = _config(
        server, network, amis={}, amiNamePattern="talos-{version}-*-amd64", amiOwners=[network["owner"]]
    )
    ctx = await _launched(provider, config)
    (instance,) = _instances(server, ctx.uid)
    assert instance["ImageId"] == network["image"]
    missing = context(provider, config, talos_version="v1.11.0")
    with pytest.raises(EC2Error, match="no AMI named talos-v1.11.0-\\*-amd64 for Talos v1.11.0"):
        await run_step(provider, missing, "launch")


async def test_destroying_terminates_and_an_instance_gone_already_counts_as_destroyed(
    server: Ec2Server, network: dict[str, str], provider: AWSProvider
) -> None:
    ctx = await _launched(provider, _config(server, network))
    instance_id = ctx.state["instance"]
    await provider.deprovision(ctx)
    assert _state(server, instance_id) in ("shutting-down", "terminated")
    await provider.deprovision(ctx)  # already terminated
    # Killed before the instance was recorded: found by its tags, and terminated.
    unrecorded = await _launched(provider, _config(server, network))
    made = unrecorded.state.pop("instance")
    await provider.deprovision(unrecorded)
    assert _state(server, made) in ("shutting-down", "terminated")
    # Never made at all.
    await provider.deprovision(context(provider, _config(server, network)))


async def test_an_instance_terminated_behind_herders_back_no_longer_exists(
    server: Ec2Server, network: dict[str, str], provider: AWSProvider
) -> None:
    ctx = await _launched(provider, _config(server, network))
    await run_step(provider, ctx, "running")
    assert await provider.exists(ctx)
    server.ec2().terminate_instances(InstanceIds=[ctx.state["instance"]])
    assert not await provider.exists(ctx)


async def test_an_instance_aws_no_longer_knows_counts_as_destroyed(
    server: Ec2Server, network: dict[str, str], provider: AWSProvider
) -> None:
    """EC2 forgets a terminated instance after a while (about an hour): asked for by its id, it answers
    InvalidInstanceID.NotFound, as moto does for an id it never made."""
    ctx = await _launched(provider, _config(server, network))
    server.ec2().terminate_instances(InstanceIds=[ctx.state["instance"]])
    vanished = "i-0123456789abcdef0"
    with pytest.raises(ClientError, match=r"InvalidInstanceID\.NotFound"):
        server.ec2().describe_instances(InstanceIds=[vanished])
    ctx.state["instance"] = vanished
    assert not await provider.exists(ctx)
    await provider.deprovision(ctx)  # destroyed already: nothing to terminate, and no error
    with pytest.raises(Fail, match=f"instance {vanished} was terminated before it ran: missing"):
        await run_step(provider, ctx, "running")
    with pytest.raises(Fail, match=f"instance {vanished} was terminated before it ran"):
        await run_step(provider, ctx, "launch")  # never a second instance for the request
    # Gone between herder's look and its TerminateInstances: destroyed all the same.
    racing = await _launched(provider, _config(server, network))
    missing = f"The instance ID '{racing.state['instance']}' does not exist"
    server.fail("TerminateInstances", "InvalidInstanceID.NotFound", missing, times=1)
    try:
        await provider.deprovision(racing)
    finally:
        server.clear()


async def test_an_instance_terminated_while_it_boots_fails_the_request(
    server: Ec2Server, network: dict[str, str], provider: AWSProvider
) -> None:
    ctx = await _launched(provider, _config(server, network))
    server.ec2().terminate_instances(InstanceIds=[ctx.state["instance"]])
    with pytest.raises(Fail, match="was terminated before it ran"):
        await run_step(provider, ctx, "running")


async def test_power_stops_starts_and_reboots_the_instance(
    server: Ec2Server, network: dict[str, str], provider: AWSProvider
) -> None:
    ctx = await _launched(provider, _config(server, network))
    instance_id = ctx.state["instance"]
    await provider.power(ctx, False)
    assert _state(server, instance_id) in ("stopping", "stopped")
    await provider.power(ctx, True)
    assert _state(server, instance_id) in ("pending", "running")
    await provider.reboot(ctx)
    assert _state(server, instance_id) in ("pending", "running")


def test_the_config_is_checked_naming_the_field(tmp_path: Path) -> None:
    from herder.infra import ConfigError, load_config

    with pytest.raises(ConfigError, match="subnetID: Field required"):
        load_config(AWSConfig, {"region": REGION})
    with pytest.raises(ConfigError, match="accessKeyID and secretAccessKey go together"):
        load_config(AWSConfig, {"region": REGION, "subnetID": "subnet-1", "accessKeyID": "AKIA"})
    from herder.providers.aws import AWSMachine

    with pytest.raises(ValueError, match="herder.dev/ and aws: prefixes are reserved"):
        AWSMachine.model_validate({"tags": {"herder.dev/cluster": "x"}})
