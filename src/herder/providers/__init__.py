"""Infra providers that make real machines, written on the provider SDK (``herder.infra``) as any provider
is, and found by name among the entry points of group ``herder.providers``:

- ``redfish`` (``herder.providers.redfish``): bare metal from a static pool of BMCs, booted from the
  Image Factory's ISO over Redfish virtual media;
- ``aws`` (``herder.providers.aws``): EC2 instances.

They use herder only through its public API (``herder.client``, ``herder.infra``, ``herder.resources``)
and reach machines as herder does (``herder.talos``); never ``herder.state``.
"""
