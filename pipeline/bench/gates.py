"""SLO gates: every gate is checked on every measured level; any failure fails the run (exit 4,
`require_pass`, which the CLI calls after showing the result)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from pipeline.bench.spec import Slo
from pipeline.core.errors import GateFailedError


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


FAILED_COLUMNS = ("SLO", "level", "measured", "bound")


def failed_rows(failed: Sequence[GateResult]) -> list[list[str]]:
    """One row per failed gate (FAILED_COLUMNS): the SLO, the level, the measured value and the bound."""
    return [[g.slo, g.level, "-" if g.value is None else f"{g.value:.3f}",
             ("<= " if g.direction == "max" else ">= ") + f"{g.bound:g}"] for g in failed]


def require_pass(failed: Sequence[GateResult], report_dir: Path | str | None) -> None:
    """GateFailedError (exit 4) naming every failed gate, when there is one (a BenchResult's failed_gates)."""
    if failed:
        lines = "; ".join(f"{r[0]} at {r[1]} = {r[2]} (bound {r[3]})" for r in failed_rows(failed))
        raise GateFailedError(f"{len(failed)} SLO gate(s) failed: {lines}", hint=f"The full report is in {report_dir}.")
