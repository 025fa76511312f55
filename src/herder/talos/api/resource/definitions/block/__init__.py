"""Generated stubs of Talos's ``talos.resource.definitions.block``, herder's subset."""
