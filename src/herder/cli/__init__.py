"""The ``herder`` command line: the composition root that wires every layer together."""
