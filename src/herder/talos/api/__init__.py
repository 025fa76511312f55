"""Generated stubs of herder's subsets of the Talos APIs: the machine API (``machine``, ``common``), COSI's
resource API (``cosi``) and Talos's resource definitions (``resource.definitions``); regenerate with
``make protos``."""
