"""Generic Kubernetes-style HTTP machinery over any kind registry and store."""
