"""herder's domain controllers (clusters, machine sets, provisioning, managed control planes)."""
