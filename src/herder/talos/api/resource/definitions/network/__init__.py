"""Generated stubs of Talos's ``talos.resource.definitions.network``, herder's subset."""
