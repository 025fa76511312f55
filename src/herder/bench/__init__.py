"""Benchmarks, run as ``python -m herder.bench NAME``; each prints one JSON object per line."""
