"""The Redfish bare-metal infra provider (entry point ``redfish`` of group ``herder.providers``)."""

from herder.providers.redfish.bmc import BMCError
from herder.providers.redfish.config import BMCConfig, RedfishConfig, RedfishMachine
from herder.providers.redfish.provider import RedfishProvider

__all__ = ["BMCConfig", "BMCError", "RedfishConfig", "RedfishMachine", "RedfishProvider"]
