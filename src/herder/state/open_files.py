"""The open-files limit of a herder process: a server follows every machine over a connection (a TLS tunnel
of a few sockets each), serves each cluster's load balancer and keeps machine logs; an emulator holds a
listening socket per machine and two more per call. The soft limit (often 1024) is lifted to the hard one
at start, as Go's runtime does for every program."""

from __future__ import annotations

import resource


def raise_limit() -> int:
    """Lift the soft limit on open files to the hard one; returns the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return soft


__all__ = ["raise_limit"]
