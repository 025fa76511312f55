"""herder's Kubernetes API proxy: ``/k8s/clusters/NAMESPACE/NAME/...`` on herder's API address.

Every request is authenticated with the caller's herder credential and relayed to the cluster's
Kubernetes API with herder's own client certificate, impersonating the caller with the groups the
AccessPolicy gives it there (see ``herder.api.cluster_access``), so that the cluster's RBAC decides, and
revoking a herder credential or a rule ends the access at once. A layer beside ``api`` and
``talos_gateway``: it needs ``api``'s identities, policy and audit trail, ``talos``'s certificates and the
clusters' secrets from ``state``.
"""
