"""Test data kept in the repository, so that a lone clone runs its tests with nothing beside it."""

from pathlib import Path

DATA = Path(__file__).resolve().parent
TALOS = DATA / "talos"
"""Talos's own test vectors (see talos/README.md)."""
GOLDEN = TALOS / "golden"
PATCH_VECTORS = TALOS / "patches"
FIXTURES = TALOS / "fixtures"
TALOS_PROTOS = TALOS / "proto"
"""Talos's own API definitions (see talos/README.md)."""
