"""What the store refuses for provisioning, whoever writes (422 naming the field):

- an InfraProvider whose id is not a DNS label, that is hidden without a ``herder-`` name, or whose
  ``spec.config`` the provider's published ``status.configSchema`` refuses (values are not quoted);
- a MachineRequestSet, MachineRequest or auto-provisioning MachineClass of a provider that does not
  exist (or is hidden, for those below Support) or is being deleted, or whose ``providerData`` the
  provider's published ``status.schema`` refuses; a request of a Talos version herder has no contract
  for; a MachineRequest whose spec changes;
- a MachineSet allocating an ``unlimited`` number of machines from an auto-provisioning class;
- a Machine asked to change power (``spec.power``) that is not from a provider able to do it.
"""

from __future__ import annotations

from typing import Any

from herder.controllers.provisioning import provider_schema
from herder.controllers.writers import writer_sees_hidden
from herder.resources import FieldError, InvalidObject, Resource
from herder.resources.access import HIDDEN_LABEL, INFRA_PROVIDER_LABEL, RESERVED_PREFIX
from herder.resources.clusters import MACHINE_SET, MachineSetSpec
from herder.resources.machines import MACHINE, MACHINE_CLASS, MachineClassSpec
from herder.resources.provisioning import (
    INFRA_PROVIDER,
    MACHINE_REQUEST,
    MACHINE_REQUEST_SET,
    InfraProviderSpec,
    InfraProviderStatus,
    provider_data_object,
    valid_provider_id,
)
from herder.resources.status import status_of
from herder.state.admission import Admission, Write
from herder.state.errors import NotFound
from herder.state.store import Store
from herder.talos.contracts import UnknownTalosVersion, VersionContract


def _invalid(obj: Resource, *causes: FieldError) -> InvalidObject:
    return InvalidObject(obj.kind, obj.name, list(causes))


class ProvisioningAdmission:
    def __init__(self, store: Store) -> None:
        self._store = store

    def register(self, admission: Admission) -> None:
        admission.register(INFRA_PROVIDER.kind, self.infra_provider)
        admission.register(MACHINE_REQUEST_SET.kind, self.request)
        admission.register(MACHINE_REQUEST.kind, self.request)
        admission.register(MACHINE_CLASS.kind, self.machine_class)
        admission.register(MACHINE_SET.kind, self.machine_set)
        admission.register(MACHINE.kind, self.machine)

    async def _get(self, kind: str, name: str, namespace: str | None = None) -> Resource | None:
        try:
            return await self._store.get(kind, name, namespace)
        except NotFound:
            return None

    async def infra_provider(self, write: Write) -> None:
        new = write.new
        if new is None:
            return
        if not valid_provider_id(new.name):
            raise _invalid(
                new, FieldError("metadata.name", "a provider id is a DNS label: lowercase letters, digits, -")
            )
        spec = INFRA_PROVIDER.spec_of(new, InfraProviderSpec)
        if spec.hidden and not new.name.startswith(RESERVED_PREFIX):
            raise _invalid(
                new, FieldError("spec.hidden", f"a hidden provider's id must begin with {RESERVED_PREFIX!r}")
            )
        if new.metadata.deletion_timestamp or spec.config is None:
            return
        published = status_of(new, InfraProviderStatus).config_schema
        try:
            causes = provider_schema.check(published, spec.config, "spec.config", quote_values=False)
        except provider_schema.SchemaUnusable:
            return  # the provider's mistake: its Ready condition says so
        if causes:
            raise _invalid(new, *causes)

    async def _provider(self, write: Write, provider_id: str, where: str) -> Resource:
        """The provider a request names, as the writer may know it: a hidden one does not exist for
        those below Support."""
        obj = write.object
        provider = await self._get(INFRA_PROVIDER.kind, provider_id)
        hidden = provider is not None and HIDDEN_LABEL in provider.metadata.labels
        if hidden and not await writer_sees_hidden(self._store, write.actor):
            provider = None
        if provider is None:
            raise _invalid(obj, FieldError(where, f"infra provider {provider_id!r} does not exist"))
        if provider.metadata.deletion_timestamp:
            raise _invalid(obj, FieldError(where, f"infra provider {provider_id!r} is being deleted"))
        return provider

    async def _provider_data(
        self, write: Write, provider_id: str, data: Any, where: str, provider_field: str
    ) -> None:
        provider = await self._provider(write, provider_id, provider_field)
        published = status_of(provider, InfraProviderStatus).schema_
        try:
            causes = provider_schema.check(published, data if data is not None else {}, where)
        except provider_schema.SchemaUnusable as exc:
            causes = [FieldError(where, f"cannot be checked: infra provider {provider_id!r}: {exc}")]
        if causes:
            raise _invalid(write.object, *causes)

    async def request(self, write: Write) -> None:
        new, old = write.new, write.old
        if new is None or new.metadata.deletion_timestamp:
            return
        spec = new.spec or {}
        if old is not None:
            if new.kind == MACHINE_REQUEST.kind and (old.spec or {}) != spec:
                raise _invalid(new, FieldError("spec", "a machine request's spec cannot be changed"))
            if (old.spec or {}) == spec:
                return  # labels, finalizers: nothing to check again
        try:
            VersionContract.parse(spec["talosVersion"])
        except UnknownTalosVersion as exc:
            raise _invalid(new, FieldError("spec.talosVersion", str(exc))) from None
        await self._provider_data(
            write, spec["providerID"], spec.get("providerData"), "spec.providerData", "spec.providerID"
        )

    async def machine_class(self, write: Write) -> None:
        new = write.new
        if new is None:
            return
        auto = MACHINE_CLASS.spec_of(new, MachineClassSpec).auto_provision
        if auto is None or (write.old is not None and (write.old.spec or {}) == (new.spec or {})):
            return
        try:
            data = provider_data_object(auto.provider_data)
        except ValueError as exc:
            raise _invalid(new, FieldError("spec.autoProvision.providerData", str(exc))) from None
        await self._provider_data(
            write,
            auto.provider_id,
            data,
            "spec.autoProvision.providerData",
            "spec.autoProvision.providerID",
        )

    async def machine_set(self, write: Write) -> None:
        new = write.new
        if new is None or new.metadata.deletion_timestamp:
            return
        allocation = MACHINE_SET.spec_of(new, MachineSetSpec).machine_class
        if allocation is None or allocation.size != "unlimited":
            return
        machine_class = await self._get(MACHINE_CLASS.kind, allocation.name, new.namespace)
        if machine_class is not None and (machine_class.spec or {}).get("autoProvision"):
            raise _invalid(
                new,
                FieldError(
                    "spec.machineClass.size",
                    f"class {allocation.name} provisions machines on demand: give a count, not unlimited",
                ),
            )

    async def machine(self, write: Write) -> None:
        new, old = write.new, write.old
        if new is None or new.metadata.deletion_timestamp:
            return
        power = (new.spec or {}).get("power")
        if power is None or (old is not None and (old.spec or {}).get("power") == power):
            return
        provider_id = new.metadata.labels.get(INFRA_PROVIDER_LABEL)
        provider = await self._get(INFRA_PROVIDER.kind, provider_id) if provider_id else None
        if provider is None:
            raise _invalid(new, FieldError("spec.power", f"machine {new.name} is not from an infra provider"))
        if not status_of(provider, InfraProviderStatus).capabilities.power:
            raise _invalid(
                new,
                FieldError(
                    "spec.power", f"infra provider {provider_id} does not control its machines' power"
                ),
            )
