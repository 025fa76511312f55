"""The Talos emulator: many emulated Talos machines in one process.

Its subpackages import only downward, never in a circle (``tests/emu/test_layers.py`` checks it):

- the modules here (``errors``, ``timings``, ``options``): the vocabulary every layer shares;
- ``cluster``: what the machines of one cluster share: the emulated etcd and trustd CA, the emulated
  Kubernetes API and what its kubelets and controllers write there;
- ``machine``: one emulated machine (its lifecycle, its config, its apid listener and certificates, its
  events) and the Talos API every machine answers;
- ``bmc``: the machines' emulated BMCs (``--bmc``): their Redfish service and each machine's firmware;
- ``control``: the emulator as a whole (``Emulator`` composes the layers below), its persistence, its
  control API, and how it runs: as a process, in the demo, forming clusters the operator's way.

A lower layer never knows the one above it: what it needs of it is a small ``Protocol`` it owns
(``cluster.services.ClusterMachines``, ``machine.lifecycle.MachineHost``, ``machine.routing.Fleet``).
"""
