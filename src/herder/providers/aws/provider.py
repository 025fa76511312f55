"""The AWS EC2 provider: one instance per MachineRequest, booted from the Talos AMI of the request's
version (and schematic), in the configured subnet and security groups.

Steps:

- ``launch``: the instance of the request, found by its tags (``herder.dev/machine-request-uid``) or
  made by ``RunInstances`` with the request's uid as ``ClientToken``: a provider killed after the call and
  before it recorded the instance adopts it when it runs the step again, and AWS itself answers a retried
  call with the instance it made. Capacity and quota errors fail the attempt with AWS's message: the SDK
  retries it with backoff and keeps the error on the request.
- ``running``: until the instance runs; its private address is where herder reaches its Talos API.
- ``identify``: until Talos answers there in maintenance mode; the machine is reported by the UUID it
  reports (its SMBIOS UUID, which EC2's API does not tell).

Destroying terminates the instance (one missing or terminated already counts as destroyed); an instance
terminated behind herder's back makes ``exists`` false. Power is StartInstances, StopInstances and
RebootInstances.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from herder.infra import Fail, Provider, RequestContext, Retry, Step
from herder.providers.aws.config import AWSConfig, AWSMachine
from herder.providers.maintenance import maintenance_uuid
from herder.resources.access import INFRA_PROVIDER_LABEL
from herder.resources.provisioning import MACHINE_REQUEST_LABEL

if TYPE_CHECKING:
    from types_boto3_ec2 import EC2Client
    from types_boto3_ec2.type_defs import InstanceTypeDef

Context = RequestContext[AWSMachine, AWSConfig]
T = TypeVar("T")

UID_TAG = "herder.dev/machine-request-uid"
"""The tag that finds a request's instance again (its uid: a request of the same name later is another)."""

GONE_STATES = ("shutting-down", "terminated")
CAPACITY_ERRORS = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientFreeAddressesInSubnet",
        "InstanceLimitExceeded",
        "VcpuLimitExceeded",
        "MaxSpotInstanceCountExceeded",
        "RequestLimitExceeded",
        "Unavailable",
        "ServiceUnavailable",
        "InternalError",
    }
)
"""AWS errors that go away by themselves (capacity, quotas, throttling, AWS's own trouble): an attempt that
meets one is retried. Others (a wrong AMI, subnet or credentials) are retried too, until an Admin fixes the
config, but their messages say what to fix."""


class EC2Error(Exception):
    """An EC2 call failed: the operation, AWS's error code and its message."""

    def __init__(self, operation: str, code: str, message: str) -> None:
        retry = "; AWS is short of capacity or a quota: retried" if code in CAPACITY_ERRORS else ""
        super().__init__(f"EC2 {operation}: {code}: {message}{retry}")
        self.operation, self.code = operation, code


class AWSProvider(Provider[AWSMachine, AWSConfig]):
    data_model = AWSMachine
    config_model = AWSConfig
    display_name = "AWS EC2"
    description = "Talos machines as EC2 instances"
    version = "1.0.0"
    supports_power = True

    def __init__(self) -> None:
        self._ec2: EC2Client | None = None
        self._settings: tuple[Any, ...] = ()
        self._config: AWSConfig | None = None

    async def start(self, config: AWSConfig) -> None:
        self._client(config)

    def _client(self, config: AWSConfig) -> EC2Client:
        """The EC2 client of the config as it is now (herder's copy is re-read at every heartbeat)."""
        settings = (
            config.region,
            config.endpoint,
            config.access_key_id,
            config.secret_access_key.get_secret_value(),
            config.session_token.get_secret_value(),
        )
        if self._ec2 is None or settings != self._settings:
            session = boto3.session.Session(
                aws_access_key_id=config.access_key_id or None,
                aws_secret_access_key=config.secret_access_key.get_secret_value() or None,
                aws_session_token=config.session_token.get_secret_value() or None,
                region_name=config.region,
            )
            self._ec2 = session.client(
                "ec2",
                endpoint_url=config.endpoint or None,
                # The SDK's runner retries failed attempts with its own backoff, keeping the error shown:
                # boto3 only smooths over a throttled call or a dropped connection.
                config=Config(
                    retries={"mode": "standard", "max_attempts": 2}, connect_timeout=10, read_timeout=30
                ),
            )
            self._settings = settings
        return self._ec2

    async def _call(self, ctx: Context, operation: str, call: Callable[[EC2Client], T]) -> T:
        ec2 = self._client(ctx.config)
        try:
            return await asyncio.to_thread(call, ec2)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise EC2Error(operation, str(error.get("Code", "")), str(error.get("Message", ""))) from None
        except BotoCoreError as exc:
            raise EC2Error(operation, type(exc).__name__, str(exc)) from None

    def steps(self) -> Sequence[Step]:
        return [
            Step("launch", self._launch),
            Step("running", self._running),
            Step("identify", self._identify),
        ]

    # --- finding a request's instance ---

    async def _find(self, ctx: Context) -> InstanceTypeDef | None:
        """The request's instance that is not gone, by the id recorded or else by its tags."""
        instance_id = str(ctx.state.get("instance") or "")
        if instance_id:
            found = await self._describe(ctx, instance_id)
            if found is not None and found.get("State", {}).get("Name") not in GONE_STATES:
                return found
            return None
        answer = await self._call(
            ctx,
            "DescribeInstances",
            lambda ec2: ec2.describe_instances(
                Filters=[
                    {"Name": f"tag:{UID_TAG}", "Values": [ctx.uid]},
                    {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
                ]
            ),
        )
        instances = [i for r in answer.get("Reservations", []) for i in r.get("Instances", [])]
        return min(instances, key=lambda i: str(i.get("LaunchTime", ""))) if instances else None

    async def _describe(self, ctx: Context, instance_id: str) -> InstanceTypeDef | None:
        try:
            answer = await self._call(
                ctx, "DescribeInstances", lambda ec2: ec2.describe_instances(InstanceIds=[instance_id])
            )
        except EC2Error as exc:
            if exc.code == "InvalidInstanceID.NotFound":
                return None
            raise
        instances = [i for r in answer.get("Reservations", []) for i in r.get("Instances", [])]
        return instances[0] if instances else None

    # --- provisioning ---

    async def _launch(self, ctx: Context) -> None:
        found = await self._find(ctx)
        if found is None:
            if ctx.state.get("instance"):
                raise Fail(f"instance {ctx.state['instance']} was terminated before it ran")
            found = await self._run_instance(ctx)
        ctx.state["instance"] = found["InstanceId"]

    async def _run_instance(self, ctx: Context) -> InstanceTypeDef:
        config, data = ctx.config, ctx.data
        image = await self._image(ctx)
        tags = {
            **data.tags,
            "Name": ctx.name,
            UID_TAG: ctx.uid,
            MACHINE_REQUEST_LABEL: ctx.name,
            INFRA_PROVIDER_LABEL: ctx.provider_id,
        }
        tag_list: Any = [{"Key": k, "Value": v} for k, v in tags.items()]
        arguments: dict[str, Any] = {
            "ImageId": image["ImageId"],
            "InstanceType": data.instance_type or config.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "ClientToken": ctx.uid,
            "SubnetId": config.subnet_id,
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tag_list},
                {"ResourceType": "volume", "Tags": tag_list},
            ],
        }
        if config.security_group_ids:
            arguments["SecurityGroupIds"] = config.security_group_ids
        if data.disk_gib:
            arguments["BlockDeviceMappings"] = [
                {
                    "DeviceName": image.get("RootDeviceName") or "/dev/xvda",
                    "Ebs": {"VolumeSize": data.disk_gib, "VolumeType": "gp3", "DeleteOnTermination": True},
                }
            ]
        answer = await self._call(ctx, "RunInstances", lambda ec2: ec2.run_instances(**arguments))
        return answer["Instances"][0]

    async def _image(self, ctx: Context) -> dict[str, Any]:
        """The AMI of the request's Talos version (and schematic, when it customizes the image)."""
        config, version = ctx.config, ctx.talos_version
        image_id = config.amis.get(f"{ctx.schematic_id}/{version}") or config.amis.get(version, "")
        query: dict[str, Any]
        if image_id:
            query = {"ImageIds": [image_id]}
        elif config.ami_name_pattern:
            name = config.ami_name_pattern.replace("{version}", version)
            query = {"Owners": config.ami_owners, "Filters": [{"Name": "name", "Values": [name]}]}
        else:
            raise EC2Error(
                "DescribeImages",
                "NoImage",
                f"no AMI for Talos {version}: set amis[{version!r}] or amiNamePattern in the provider config",
            )
        answer = await self._call(ctx, "DescribeImages", lambda ec2: ec2.describe_images(**query))
        images = sorted(answer.get("Images", []), key=lambda i: str(i.get("CreationDate", "")))
        if not images:
            wanted = image_id or f"named {config.ami_name_pattern.replace('{version}', version)}"
            raise EC2Error("DescribeImages", "NoImage", f"no AMI {wanted} for Talos {version}")
        return dict(images[-1])

    async def _running(self, ctx: Context) -> None:
        instance_id = str(ctx.state["instance"])
        found = await self._describe(ctx, instance_id)
        state = str((found or {}).get("State", {}).get("Name", "missing"))
        if found is None or state in GONE_STATES:
            reason = str((found or {}).get("StateReason", {}).get("Message", "")) or state
            raise Fail(f"instance {instance_id} was terminated before it ran: {reason}")
        if state != "running":
            raise Retry(f"instance {instance_id} is {state}", after=2.0)
        address = str(found.get("PrivateIpAddress") or "")
        if not address:
            raise Retry(f"instance {instance_id} has no private address yet", after=2.0)
        ctx.state["address"] = address

    async def _identify(self, ctx: Context) -> None:
        address = str(ctx.state["address"])
        uuid = await maintenance_uuid(address, waiting_for=f"instance {ctx.state['instance']} boots Talos")
        ctx.set_machine(uuid, address)

    # --- the rest of the machine's life ---

    async def deprovision(self, ctx: Context) -> None:
        found = await self._find(ctx)
        if found is None:
            return  # never made, terminated already, or gone behind herder's back
        instance_id = found["InstanceId"]
        try:
            await self._call(
                ctx, "TerminateInstances", lambda ec2: ec2.terminate_instances(InstanceIds=[instance_id])
            )
        except EC2Error as exc:
            if exc.code != "InvalidInstanceID.NotFound":
                raise

    async def exists(self, ctx: Context) -> bool:
        instance_id = str(ctx.state.get("instance") or "")
        if not instance_id:
            return True  # nothing recorded to check (a request provisioned by an older run)
        found = await self._describe(ctx, instance_id)
        return found is not None and found.get("State", {}).get("Name") not in GONE_STATES

    async def power(self, ctx: Context, on: bool) -> None:
        instance_id = str(ctx.state["instance"])
        if on:
            await self._call(
                ctx, "StartInstances", lambda ec2: ec2.start_instances(InstanceIds=[instance_id])
            )
        else:
            await self._call(ctx, "StopInstances", lambda ec2: ec2.stop_instances(InstanceIds=[instance_id]))

    async def reboot(self, ctx: Context) -> None:
        instance_id = str(ctx.state["instance"])
        await self._call(ctx, "RebootInstances", lambda ec2: ec2.reboot_instances(InstanceIds=[instance_id]))
