"""One emulated Talos machine: its persisted record (``record``), its lifecycle (``lifecycle``), its config as
Talos reads it (``config``, ``kube_config``), its apid listener and certificates (``network``,
``certs``), its events (``events``), its services' and kernel's logs (``logs``), what its kernel and
runtime report (``system``) and its files (``files``), its resources (``resources``, with those derived
from its state in ``state_resources``), what it answers on the machine API (``api``), and the gRPC Talos
APIs every machine serves: the machine API (``service``) and the resource API (``resource_service``),
routed as apid routes (``routing``)."""
