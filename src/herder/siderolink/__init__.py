"""herder's side of SideroLink: the Provision API machines call to join (``herder serve
--siderolink-listen``), the WireGuard interface they join through, and the join tokens that let them."""
