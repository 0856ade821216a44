"""Summary statistics. Pure functions: no printing, no mutation of their arguments."""

from __future__ import annotations

from typing import Iterable

import numpy as np

STAT_KEYS = ("mean", "min", "max", "std", "p50", "p90", "p95", "p99")


def summarize(values: Iterable[float | None]) -> dict[str, float | None]:
    """mean, min, max, std (population) and p50/p90/p95/p99 (linear interpolation) of the values
    that are not None; every key is None when there are none. `count` says how many there were."""
    data = np.array([v for v in values if v is not None], dtype=float)
    if data.size == 0:
        return {"count": 0, **{k: None for k in STAT_KEYS}}
    p50, p90, p95, p99 = np.percentile(data, [50, 90, 95, 99])
    return {
        "count": int(data.size),
        "mean": float(data.mean()),
        "min": float(data.min()),
        "max": float(data.max()),
        "std": float(data.std()),
        "p50": float(p50),
        "p90": float(p90),
        "p95": float(p95),
        "p99": float(p99),
    }


def linear_fit(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """Least-squares slope and intercept, or None with fewer than two distinct x."""
    if len(xs) < 2 or len(set(xs)) < 2:
        return None
    slope, intercept = np.polyfit(np.array(xs, dtype=float), np.array(ys, dtype=float), 1)
    return float(slope), float(intercept)
