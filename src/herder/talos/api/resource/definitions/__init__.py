"""Generated stubs of Talos's resource definitions, one package per resource group (``talos.resource.definitions.*``)."""
