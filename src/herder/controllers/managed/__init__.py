"""Managed control planes: the platform runs a cluster's control planes on a hidden provider's machines."""
