"""One emulated Talos machine: its persisted record (``record``), its lifecycle (``machine``), its config as
Talos reads it (``config``, ``kube_config``), its apid listener and certificates (``network``,
``certs``), its events (``events``), and the gRPC Talos API every machine answers (``service``)."""
