"""What the machines of one emulated cluster share: the emulated etcd and the Talos CA their trustd hands
out (``state``), the cluster's emulated Kubernetes API (``kube_api``, ``kubernetes``, with the settings
``kube_facts`` names), and what keeps both following the machines (``services``)."""
