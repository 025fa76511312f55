"""The AWS EC2 infra provider (entry point ``aws`` of group ``herder.providers``)."""

from herder.providers.aws.config import AWSConfig, AWSMachine
from herder.providers.aws.provider import AWSProvider, EC2Error

__all__ = ["AWSConfig", "AWSMachine", "AWSProvider", "EC2Error"]
