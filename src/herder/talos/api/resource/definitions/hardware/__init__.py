"""Generated stubs of Talos's ``talos.resource.definitions.hardware``, herder's subset."""
