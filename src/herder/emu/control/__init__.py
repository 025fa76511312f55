"""The emulator as a whole: ``emulator.Emulator`` composes machines and cluster services; ``store`` persists
them; ``api`` is its control API; ``run`` and ``process`` run it (in this process, or as a child);
``formation`` forms a cluster the operator's way; ``demo`` is what ``herder demo`` runs."""
