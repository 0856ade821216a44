"""The accuracy gate: a format fails when its perplexity rises more than max_delta (relative) over
the baseline. `evaluate` marks the rows; the caller raises with `check_gate` (exit 4)."""

from __future__ import annotations

import math

from pipeline.core.errors import GateFailedError
from pipeline.evaluate.spec import EvaluateResult


def apply_gate(result: EvaluateResult, max_delta: float) -> EvaluateResult:
    """Mark each format passed/failed against max_delta (relative perplexity rise over the baseline)."""
    formats = tuple(f.model_copy(update={"passed": f.delta <= max_delta}) for f in result.formats)
    failed = tuple(f.name for f in formats if not f.passed)
    return result.model_copy(update={"formats": formats, "failed": failed, "passed": not failed, "max_delta": max_delta})


def check_gate(result: EvaluateResult) -> None:
    """Raise GateFailedError (exit 4) with a table of the formats whose perplexity rose too much."""
    if result.passed:
        return
    lines = [f"{'format':<18} {'perplexity':>11} {'delta':>9} {'allowed':>9}"]
    for row in result.formats:
        if not row.passed:
            lines.append(
                f"{row.name:<18} {row.perplexity:>11.3f} {pct(row.delta):>9} {pct(result.max_delta):>9}"
            )
    raise GateFailedError(
        f"Accuracy gate failed for {len(result.failed)} of {len(result.formats)} format(s) "
        f"(baseline perplexity {result.baseline.perplexity:.3f}):\n" + "\n".join(lines),
        hint=f"Ship a format that passed, calibrate with more data (--calib-size), or allow more with --max-delta "
        f"(reports: {result.report_dir}).",
    )


def pct(value: float) -> str:
    """A relative change as a signed percentage ("inf" when infinite)."""
    return "inf" if not math.isfinite(value) else f"{value * 100:+.2f}%"
