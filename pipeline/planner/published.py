"""Checking the time model against TensorRT-LLM's published `trtllm-bench throughput` figures
(shared/reference/trtllm_published_throughput.tsv; scripts/plan_vs_published.py fits the constants)."""

from __future__ import annotations

from typing import Any

from pipeline.core.errors import InvalidInputError
from pipeline.planner.recommend import recommend_build
from pipeline.planner.rates import Efficiency
from pipeline.planner.scenario import Scenario
from pipeline.planner.shapes import ModelSpec
from pipeline.planner.timing import ThroughputEstimate, max_throughput

_PUBLISHED_PRECISIONS = {"FP8": ("fp8", "fp8"), "FP16": ("fp16", "auto"), "BF16": ("bf16", "auto")}
PUBLISHED_KV_FRACTION = 0.95  # the perf-overview runs use --kv_cache_free_gpu_mem_fraction 0.95


def published_scenario(model: ModelSpec, row: dict[str, Any]) -> Scenario:
    """The Scenario of one published row (gpu, precision, tp, isl, osl). FP8 means FP8 weights and an
    FP8 KV cache (trtllm-bench build sets both); FP16/BF16 a 16-bit KV cache."""
    precision = str(row["precision"])
    try:
        quant, kv = _PUBLISHED_PRECISIONS[precision.upper()]
    except KeyError:
        raise InvalidInputError(
            f"Unknown published precision {precision!r}.", hint=f"Use one of: {', '.join(_PUBLISHED_PRECISIONS)}."
        ) from None
    return Scenario(model, row["gpu"], quant, kv, int(row["tp"]), int(row["isl"]), int(row["osl"]))


def trtllm_bench_throughput(scenario: Scenario, *, efficiency: Efficiency | None = None) -> ThroughputEstimate:
    """What `trtllm-bench throughput` should report for an engine built for this scenario's ISL/OSL."""
    build = {**recommend_build(scenario, "throughput"), "kv_cache_free_gpu_mem_fraction": PUBLISHED_KV_FRACTION}
    return max_throughput(scenario, build=build, efficiency=efficiency)


def compare_published(
    model: ModelSpec, rows: list[dict[str, str]], *, efficiency: Efficiency | None = None
) -> list[dict[str, Any]]:
    """Predicted vs published output tokens/s for rows of trtllm_published_throughput.tsv."""
    out = []
    for row in rows:
        estimate = trtllm_bench_throughput(published_scenario(model, row), efficiency=efficiency)
        published = float(row["tokens_per_s"])
        out.append({
            "gpu": row["gpu"], "tp": int(row["tp"]), "precision": row["precision"],
            "isl": int(row["isl"]), "osl": int(row["osl"]),
            "published_tokens_per_s": published, "predicted_tokens_per_s": estimate.output_tokens_per_s,
            "error_pct": round(100 * (estimate.output_tokens_per_s - published) / published, 2),
            "batch": estimate.batch, "bound": estimate.bound,
        })
    return out


def median_abs_pct_error(comparison: list[dict[str, Any]]) -> float:
    errors = sorted(abs(row["error_pct"]) for row in comparison)
    if not errors:
        return float("nan")
    middle = len(errors) // 2
    return errors[middle] if len(errors) % 2 else (errors[middle - 1] + errors[middle]) / 2
