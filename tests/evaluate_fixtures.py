"""An EvaluateResult without a model, for the tests of the gate, the reports, the cache and the job."""

from __future__ import annotations

from pathlib import Path

from pipeline.evaluate.gate import apply_gate
from pipeline.evaluate.scoring import relative_delta
from pipeline.evaluate.spec import EvaluateResult, FormatResult


def format_row(name: str, ppl: float, agreement: float = 0.9, **extra) -> FormatResult:
    quant, _, kv = name.partition("+kv_")
    return FormatResult(
        name=name, quant=quant, kv_cache=kv or "auto", simulation="test", perplexity=ppl,
        delta=relative_delta(ppl, 10.0), top1_agreement=agreement, top1_accuracy=0.4, tokens=100, **extra,
    )


def sample_result(report_dir: Path, max_delta: float = 0.1) -> EvaluateResult:
    """Baseline perplexity 10; fp8 +3%, int4_awq +25%, fp8+kv_fp8 +5%, nvfp4 infinite."""
    baseline = FormatResult(name="baseline", quant="float32", kv_cache="auto", simulation="test", perplexity=10.0,
                            delta=0.0, top1_agreement=1.0, top1_accuracy=0.4, tokens=100)
    result = EvaluateResult(
        model="m", hf_dir=report_dir, dataset={"name": "d", "sha256": "0" * 64, "texts": 3, "windows": 3, "tokens": 100,
                                               "max_len": 512, "calibration_texts": 8, "calibration_sha256": "a" * 64},
        baseline=baseline,
        formats=(format_row("fp8", 10.3), format_row("int4_awq", 12.5, 0.7), format_row("fp8+kv_fp8", 10.5, kv_measured=True),
                 format_row("nvfp4", float("inf"), 0.0)),
        max_delta=max_delta, passed=True, failed=(), report_dir=report_dir, reports={}, inputs_hash="h" * 64,
    )
    return apply_gate(result, max_delta)
