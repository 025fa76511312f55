from tests.emu.fixtures import cluster_a, cluster_b, emulator

__all__ = ["cluster_a", "cluster_b", "emulator"]
