"""herder's Talos API gateway: the Talos machine API and resource API, served to users over mutual TLS as
talosctl speaks them, each call checked against the caller's herder identity and role, relayed to the
machine it names with herder's credentials of that machine's cluster, and audited.

A layer of its own (DESIGN §3 has none for it): it needs the Talos domain (``talos``), the store and the
kinds (``state``, ``resources``) and herder's identities and audit trail (``api``), and nothing of the
controllers or the HTTP server; ``herder serve`` (the composition root) runs it beside the HTTPS API.
"""
