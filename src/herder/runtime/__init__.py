"""The controller runtime: work queues, reconcile loops, backoff, ownership, garbage collection,
leader election and metrics."""
