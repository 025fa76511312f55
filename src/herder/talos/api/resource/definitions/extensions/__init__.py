"""Generated stubs of Talos's ``talos.resource.definitions.extensions``, herder's subset."""
