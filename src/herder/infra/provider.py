"""What a provider author writes: a ``Provider`` with the typed model of its request data and of its own
config, ordered provisioning steps, and how to deprovision, check on and power its machines.

Steps run in order, each must be idempotent: a provider that restarts (or crashes) runs the step it was
in again, with the private state (``ctx.state``) its earlier steps left on the request. A step raises
``Retry`` to be called again later (waiting for something, not an error), ``Fail`` when the request can
never be met, and anything else for a failed attempt: that one is retried with exponential backoff, its
error and the attempt count shown on the request until a later attempt succeeds.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from herder.client import AlreadyExists, Client
from herder.resources import Resource
from herder.resources.access import HIDDEN_LABEL, INFRA_PROVIDER_LABEL, RESERVED_PREFIX
from herder.resources.configuration import CONFIG_PATCH
from herder.resources.provisioning import MACHINE_REQUEST, MACHINE_REQUEST_LABEL, MachineRequestSpec
from herder.resources.schematic import Schematic, boot_image_url, installer_image


class Retry(Exception):
    """Not done yet: call this step again after ``after`` seconds (the message is shown meanwhile)."""

    def __init__(self, message: str, after: float = 5.0) -> None:
        super().__init__(message)
        self.after = after


class Fail(Exception):
    """The request can never be met: it is marked Failed for good (and its set replaces it)."""

    def __init__(self, message: str, reason: str = "ProvisioningFailed") -> None:
        super().__init__(message)
        self.reason = reason


class NoConfig(BaseModel):
    """The config of a provider that needs none."""

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True)
class JoinConfig:
    """How the provider's machines reach herder (herder's ``JoinConfig`` of this provider)."""

    endpoint: str = ""
    token: str = ""
    kernel_args: tuple[str, ...] = ()


DataT = TypeVar("DataT", bound=BaseModel)
ConfigT = TypeVar("ConfigT", bound=BaseModel)


@dataclass
class RequestContext(Generic[DataT, ConfigT]):
    """One MachineRequest as a provider works on it."""

    request: Resource
    spec: MachineRequestSpec
    data: DataT
    config: ConfigT
    join: JoinConfig
    client: Client
    provider_id: str
    state: dict[str, Any] = field(default_factory=dict)
    """The provider's private state, kept on the request (``status.providerState``)."""
    attempt: int = 1
    machine_uuid: str = ""
    machine_address: str = ""

    @property
    def name(self) -> str:
        return self.request.name

    @property
    def namespace(self) -> str:
        return self.request.namespace or "default"

    @property
    def uid(self) -> str:
        return self.request.metadata.uid or ""

    @property
    def talos_version(self) -> str:
        return self.spec.talos_version

    @property
    def schematic(self) -> Schematic:
        """The Image Factory schematic of the requested machine (extensions, kernel args, META)."""
        return self.spec.factory_schematic()

    @property
    def schematic_id(self) -> str:
        return self.schematic.id()

    def installer_image(self, platform: str = "metal") -> str:
        """The installer herder's configs will name for this machine: boot the same schematic."""
        return installer_image(self.schematic, self.talos_version, platform)

    def boot_image_url(self, platform: str = "metal", arch: str = "amd64", ext: str = "iso") -> str:
        return boot_image_url(self.schematic, self.talos_version, platform, arch, ext)

    def set_machine(self, uuid: str, address: str = "") -> None:
        """Report the machine that fulfils the request: its UUID (as its Talos reports it) and where
        herder reaches its Talos API (``IP`` or ``IP:PORT``)."""
        self.machine_uuid, self.machine_address = uuid.lower(), address

    async def create_config_patch(self, name: str, data: str, description: str = "") -> Resource:
        """Create (or replace) a Talos config patch for this request's machine; it goes with the request.
        The patch of a hidden request (a managed control plane's) is hidden too, under a reserved name."""
        labels = {INFRA_PROVIDER_LABEL: self.provider_id, MACHINE_REQUEST_LABEL: self.name}
        if HIDDEN_LABEL in self.request.metadata.labels:
            labels[HIDDEN_LABEL] = "true"
            name = name if name.startswith(RESERVED_PREFIX) else RESERVED_PREFIX + name
        patch = Resource.model_validate(
            {
                "apiVersion": CONFIG_PATCH.api_version,
                "kind": CONFIG_PATCH.kind,
                "metadata": {
                    "name": name,
                    "namespace": self.namespace,
                    "labels": labels,
                    # It goes with the request (herder would make it so, with one more write).
                    "ownerReferences": [
                        {
                            "apiVersion": MACHINE_REQUEST.api_version,
                            "kind": MACHINE_REQUEST.kind,
                            "name": self.name,
                            "uid": self.uid,
                        }
                    ],
                },
                "spec": {"data": data, "description": description},
            }
        )
        try:
            return await self.client.create(patch)
        except AlreadyExists:
            current = await self.client.get(CONFIG_PATCH, name, self.namespace)
            if current.spec == patch.spec:
                return current  # made by an earlier run of the step
            current.spec = patch.spec
            return await self.client.update(current)


StepFunction = Callable[[RequestContext[Any, Any]], Awaitable[None]]


@dataclass(frozen=True)
class Step:
    name: str
    run: StepFunction


class Provider(abc.ABC, Generic[DataT, ConfigT]):
    """Subclass it: set the models and metadata, give ``steps`` and ``deprovision``; the rest is optional."""

    data_model: ClassVar[type[BaseModel]]
    """The provider data of a request (a MachineRequest's ``spec.providerData``)."""
    config_model: ClassVar[type[BaseModel]] = NoConfig
    """The provider's own settings (``InfraProvider.spec.config``, or a file or the environment)."""
    display_name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    version: ClassVar[str] = "0.0.0"
    supports_power: ClassVar[bool] = False
    """Whether ``power`` and ``reboot`` work: herder accepts power requests for its machines only then."""

    @abc.abstractmethod
    def steps(self) -> Sequence[Step]:
        """The provisioning steps, in order; the last one reports the machine (``ctx.set_machine``)."""

    @abc.abstractmethod
    async def deprovision(self, ctx: RequestContext[DataT, ConfigT]) -> None:
        """Destroy the request's machine. Idempotent: a machine already gone counts as destroyed."""

    async def exists(self, ctx: RequestContext[DataT, ConfigT]) -> bool:
        """Whether the provisioned machine still exists (checked on resync; False marks it MachineGone)."""
        return True

    async def power(self, ctx: RequestContext[DataT, ConfigT], on: bool) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not control power")

    async def reboot(self, ctx: RequestContext[DataT, ConfigT]) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not control power")

    async def start(self, config: ConfigT) -> None:
        """Called once the provider's config is known, before any request (open cloud clients here)."""

    async def stop(self) -> None:
        """Called when the provider stops."""

    @classmethod
    def data_schema(cls) -> dict[str, Any]:
        """The JSON schema herder publishes for request data (and checks every request against)."""
        return cls.data_model.model_json_schema(by_alias=True)

    @classmethod
    def config_schema(cls) -> dict[str, Any]:
        return cls.config_model.model_json_schema(by_alias=True)
