"""Generated stubs of Talos's resource definitions: the specs of the resources herder reads (herder's subset)."""
