"""How the scenarios sum up their samples."""

from __future__ import annotations

import statistics


def median_of(values: list[float]) -> float:
    """The median, to one decimal (0.0 without samples)."""
    return round(statistics.median(values), 1) if values else 0.0


def percentile(values: list[float], q: float) -> float:
    """The sample at rank ``q`` (0 to 1) of the sorted values (0.0 without samples)."""
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]
