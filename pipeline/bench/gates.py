"""SLO gates: every gate is checked on every measured level; any failure fails the run (exit 4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from pipeline.bench.spec import Slo


@dataclass(frozen=True)
class GateResult:
    slo: str
    level: str
    value: float | None
    bound: float
    direction: str
    passed: bool


def lookup(summary: dict[str, Any], key: str) -> float | None:
    value: Any = summary
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value if isinstance(value, (int, float)) else None


def check_gates(slos: Sequence[Slo], levels: Sequence[dict[str, Any]]) -> list[GateResult]:
    """One result per (gate, level). A metric with no value (every request failed) fails its gate."""
    results = []
    for slo in slos:
        for level in levels:
            value = lookup(level, slo.key)
            if value is None:
                passed = False
            elif slo.direction == "max":
                passed = value <= slo.bound
            else:
                passed = value >= slo.bound
            results.append(GateResult(slo=slo.name, level=level["load"], value=value, bound=slo.bound,
                                      direction=slo.direction, passed=passed))
    return results
