"""Config patches a provider makes for the machines of its requests (their network setup, say): a
ConfigPatch labelled ``herder.dev/machine-request=<request>`` (and, as every object a provider creates,
with its own id) becomes a machine patch of the request's machine, labelled ``herder.dev/machine=<UUID>``
once the UUID is known, and owned by the request, so that it goes with it.

A patch naming a request of another provider targets nothing, and says so in a Warning event.
"""

from __future__ import annotations

from herder.controllers.provisioning.requests import reported_uuid
from herder.resources import Resource
from herder.resources.access import INFRA_PROVIDER_LABEL
from herder.resources.configuration import CONFIG_PATCH
from herder.resources.machines import MACHINE_LABEL
from herder.resources.provisioning import MACHINE_REQUEST, MACHINE_REQUEST_LABEL
from herder.runtime.controller import Context, Controller, ObjectKey, Result, Watch
from herder.runtime.index import LabelIndex
from herder.runtime.outputs import Writes


class ProviderConfigPatchController(Controller):
    name = "ProviderConfigPatch"
    primary = CONFIG_PATCH.kind
    outputs = (Writes(CONFIG_PATCH.kind, f"metadata.labels[{MACHINE_LABEL}]", "metadata.ownerReferences"),)
    concurrency = 2

    def __init__(self) -> None:
        self._patches = LabelIndex(CONFIG_PATCH.kind, MACHINE_REQUEST_LABEL)
        self.watches = (
            Watch(CONFIG_PATCH.kind, self._patches.track, label_selector=MACHINE_REQUEST_LABEL),
            Watch(MACHINE_REQUEST.kind, self._patches.by_name()),
        )

    async def reconcile(self, key: ObjectKey, ctx: Context) -> Result | None:
        patch = await ctx.get(key)
        if patch is None or patch.metadata.deletion_timestamp:
            return None
        labels = patch.metadata.labels
        name = labels.get(MACHINE_REQUEST_LABEL, "")
        request = await ctx.get(ObjectKey(MACHINE_REQUEST.kind, key.namespace, name)) if name else None
        if request is None or request.metadata.deletion_timestamp:
            return None  # not yet, or going: a patch it owns goes with it
        if request.metadata.labels.get(INFRA_PROVIDER_LABEL) != labels.get(INFRA_PROVIDER_LABEL):
            if MACHINE_LABEL in labels:

                def untarget(p: Resource) -> None:
                    p.metadata.labels.pop(MACHINE_LABEL, None)

                await ctx.mutate(key, untarget)
            await ctx.event(
                patch,
                "Warning",
                "NotThisProvidersRequest",
                f"machine request {name} is not of infra provider {labels.get(INFRA_PROVIDER_LABEL)}",
            )
            return None
        uuid = reported_uuid(request)
        owned = any(ref.uid == request.metadata.uid for ref in patch.metadata.owner_references)
        if owned and (not uuid or labels.get(MACHINE_LABEL) == uuid):
            return None
        reference = ctx.reference_to(request, controller=False)

        def target(p: Resource) -> None:
            if not any(ref.uid == reference.uid for ref in p.metadata.owner_references):
                p.metadata.owner_references.append(reference)
            if uuid:
                p.metadata.labels[MACHINE_LABEL] = uuid

        await ctx.mutate(key, target)
        return None
