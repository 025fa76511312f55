"""SideroLink on the machine's side: the kernel arguments that make a Talos machine join, and WireGuard."""
