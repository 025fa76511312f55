"""What the machines of one emulated cluster share: the emulated etcd and the Talos CA their trustd hands
out (``state``), the cluster's emulated Kubernetes (``kubernetes``, which puts together its API server
``apiserver`` on the listeners of ``kube_api``, the components' writes ``sync`` of the objects in
``manifests``, and the ``scheduler``; ``kubelet`` and ``kube_facts`` say what each machine contributes),
and what keeps both following the machines (``services``)."""
