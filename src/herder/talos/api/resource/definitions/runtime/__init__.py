"""Generated stubs of Talos's ``talos.resource.definitions.runtime``, herder's subset."""
