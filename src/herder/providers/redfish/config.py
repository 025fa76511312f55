"""What the Redfish provider is configured with (its sealed ``InfraProvider.spec.config``): the BMCs of its
pool and the Image Factory it boots from. Requests ask nothing of it (their provider data is empty)."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

PUBLIC_FACTORY = "https://factory.talos.dev"
SYSTEMS = "/redfish/v1/Systems/"


class BMCConfig(BaseModel):
    """One BMC of the pool, and the System it manages."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(min_length=1, max_length=63, description="the BMC's name (unique in the pool)")
    address: str = Field(
        description="the Redfish service URL (https://HOST:PORT), optionally with the System's path "
        "(https://HOST:PORT/redfish/v1/Systems/ID) when the service has several"
    )
    username: str = Field(min_length=1)
    password: SecretStr = Field(
        min_length=1, description="never shown: not in a repr, a log line or an error"
    )
    verify_tls: bool = Field(True, alias="verifyTLS", description="check the BMC's certificate")
    ca_file: str = Field(
        "", alias="caFile", description="the CA bundle to check it with (default: the system's)"
    )
    machine_address: str = Field(
        "",
        alias="machineAddress",
        description="where herder reaches the machine's Talos API (IP or IP:PORT: its static address or "
        "DHCP reservation); empty: the machine is reported by UUID alone and adopted once registered",
    )

    @field_validator("address")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError(f"{value!r} is not a Redfish service URL (https://HOST:PORT)")
        path = parts.path.rstrip("/")
        if path and not (path.startswith(SYSTEMS) and "/" not in path[len(SYSTEMS) :]):
            raise ValueError(f"{value!r}: the only path a BMC address may have is {SYSTEMS}ID")
        return value

    @property
    def service(self) -> str:
        """The service's base URL (scheme and authority)."""
        parts = urlsplit(self.address)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def system_path(self) -> str:
        """The System's path, or empty for the service's only System."""
        return urlsplit(self.address).path.rstrip("/")


class RedfishConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    bmcs: list[BMCConfig] = Field(description="the pool: each BMC's system makes one machine at a time")
    image_factory: str = Field(
        PUBLIC_FACTORY, alias="imageFactory", description="the Image Factory whose ISOs the machines boot"
    )

    @model_validator(mode="after")
    def _unique(self) -> RedfishConfig:
        names = [b.name for b in self.bmcs]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"bmcs: the names {', '.join(twice)} are given more than once")
        return self

    def bmc(self, name: str) -> BMCConfig | None:
        return next((b for b in self.bmcs if b.name == name), None)


class RedfishMachine(BaseModel):
    """A request asks nothing of a bare-metal machine: it gets the next free one of the pool."""

    model_config = ConfigDict(extra="forbid")
