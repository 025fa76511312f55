"""Generated stubs of COSI's resource API (``cosi.resource.State``, its resources and meta specs; herder's subset)."""
