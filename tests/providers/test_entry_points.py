"""The providers in the tree are installed as entry points of group ``herder.providers`` under the names
the docs give (``--type redfish``, ``--provider metal=aws``), with the schemas they publish."""

from __future__ import annotations

from herder.infra import load_provider, provider_types
from herder.providers.aws import AWSProvider
from herder.providers.redfish import RedfishProvider


def test_redfish_and_aws_are_installed_providers() -> None:
    assert {"emulator", "redfish", "aws"} <= set(provider_types())
    assert load_provider("redfish") is RedfishProvider and load_provider("aws") is AWSProvider


def test_their_published_config_schemas_name_the_contracts_fields() -> None:
    redfish = RedfishProvider.config_schema()
    assert set(redfish["properties"]) == {"bmcs", "imageFactory"}
    bmc = redfish["$defs"]["BMCConfig"]["properties"]
    assert {"name", "address", "username", "password", "verifyTLS", "caFile"} <= set(bmc)
    assert RedfishProvider.data_schema()["properties"] == {}
    aws = AWSProvider.config_schema()["properties"]
    assert {"region", "subnetID", "securityGroupIDs", "amis", "amiNamePattern", "instanceType"} <= set(aws)
    assert set(AWSProvider.data_schema()["properties"]) == {"instanceType", "diskGiB", "tags"}
