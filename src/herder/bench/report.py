"""The benchmark output format: one JSON object per line (name, value, unit; baseline and ratio)."""

from __future__ import annotations

import json
import statistics
import sys


def emit(
    name: str,
    value: float,
    unit: str,
    *,
    baseline: float | None = None,
    higher_is_better: bool = True,
    **extra: object,
) -> None:
    """Print one result; ``ratio`` is oriented so that higher is better whatever the unit."""
    line: dict[str, object] = {"name": name, "value": round(value, 3), "unit": unit}
    if baseline is not None:
        line["baseline"] = round(baseline, 3)
        ratio = value / baseline if higher_is_better else baseline / value
        line["ratio"] = round(ratio, 3)
    line.update(extra)
    print(json.dumps(line), flush=True)
    sys.stdout.flush()


def percentile(samples: list[float], p: float) -> float:
    if not samples:
        return float("nan")
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=100, method="inclusive")[int(p) - 1]
