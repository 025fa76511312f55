"""Generated stubs of Talos's ``machine`` proto package (``machine.MachineService``, herder's subset)."""
