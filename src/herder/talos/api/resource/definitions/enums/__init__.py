"""Generated stubs of Talos's ``talos.resource.definitions.enums``, herder's subset."""
