"""The work queue and backoff that herder's controller runtime and the provider SDK share.

A leaf: it imports nothing of herder, so both layers above it (``runtime`` and ``infra``) can use it.
"""

from herder.workqueue.backoff import Backoff, retry_delay
from herder.workqueue.queue import ShutDown, WorkQueue

__all__ = ["Backoff", "ShutDown", "WorkQueue", "retry_delay"]
