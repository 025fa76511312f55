"""The Talos domain, usable on its own: secrets bundle, config generation per version contract,
config patches, validation, version policy, talosconfig and kubeconfig, and the client of the Talos
API (machine API and resources).

This layer imports nothing of herder.
"""
