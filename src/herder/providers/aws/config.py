"""What the AWS provider is configured with (its sealed ``InfraProvider.spec.config``) and what a request
may ask of its instance (``providerData``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

RESERVED_TAG_PREFIXES = ("herder.dev/", "aws:")


class AWSConfig(BaseModel):
    """Where and how instances are made. Without keys, boto3's own chain is used (environment, shared
    files, the instance role of the host herder's provider runs on). Secrets are ``SecretStr``: never in
    a repr, a log line or an error."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    region: str = Field(min_length=1, description="the AWS region (us-east-1)")
    access_key_id: str = Field("", alias="accessKeyID", description="an access key; empty: boto3's chain")
    secret_access_key: SecretStr = Field(SecretStr(""), alias="secretAccessKey")
    session_token: SecretStr = Field(SecretStr(""), alias="sessionToken")
    endpoint: str = Field(
        "", description="the EC2 API endpoint URL, for an EC2-compatible cloud (default: AWS's own)"
    )
    subnet_id: str = Field(alias="subnetID", min_length=1, description="the subnet instances are made in")
    security_group_ids: list[str] = Field(
        default_factory=list, alias="securityGroupIDs", description="security groups of every instance"
    )
    amis: dict[str, str] = Field(
        default_factory=dict,
        description="the AMI of each Talos version (v1.13.9: ami-…), or of a schematic and version "
        "(SCHEMATIC_ID/v1.13.9) for customized images",
    )
    ami_name_pattern: str = Field(
        "",
        alias="amiNamePattern",
        description="else: the newest AMI of amiOwners whose name matches this pattern, {version} "
        "standing for the Talos version (talos-{version}-*-amd64)",
    )
    ami_owners: list[str] = Field(
        default_factory=list, alias="amiOwners", description="the accounts amiNamePattern looks in"
    )
    instance_type: str = Field("t3.small", alias="instanceType", description="the default instance type")

    @model_validator(mode="after")
    def _keys_together(self) -> AWSConfig:
        if bool(self.access_key_id) != bool(self.secret_access_key.get_secret_value()):
            raise ValueError("accessKeyID and secretAccessKey go together (or neither, for boto3's chain)")
        if self.ami_name_pattern and not self.ami_owners:
            raise ValueError("amiNamePattern needs amiOwners (the accounts whose AMIs may be used)")
        return self


class AWSMachine(BaseModel):
    """What a request asks of its instance."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    instance_type: str = Field("", alias="instanceType", description="default: the provider's instanceType")
    disk_gib: int = Field(0, alias="diskGiB", ge=0, le=16384, description="root volume size; 0: the AMI's")
    tags: dict[str, str] = Field(
        default_factory=dict, description="more tags of the instance and its volumes"
    )

    @model_validator(mode="after")
    def _own_tags(self) -> AWSMachine:
        reserved = sorted(k for k in self.tags if k.startswith(RESERVED_TAG_PREFIXES))
        if reserved:
            raise ValueError(f"tags {', '.join(reserved)}: the herder.dev/ and aws: prefixes are reserved")
        return self
