"""Generated stubs of herder's subset of the Talos machine API; regenerate with ``make protos``."""
