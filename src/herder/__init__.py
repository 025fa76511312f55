"""herder: a management plane for Talos Linux Kubernetes clusters with managed control planes."""

__version__ = "0.1.0"
