"""Checking the time model against TensorRT-LLM's published `trtllm-bench throughput` figures
(pipeline/data/trtllm_published_throughput.tsv: engine rows of 0.17, PyTorch-backend rows of 1.0 and later;
scripts/plan_vs_published.py fits the constants and cross-validates them)."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

from pipeline.core.errors import InvalidInputError
from pipeline.data import fact_rows
from pipeline.planner.rates import Efficiency, efficiency_for
from pipeline.planner.recommend import recommend_build
from pipeline.planner.scenario import Scenario
from pipeline.planner.shapes import ModelSpec, model_spec_from_dict
from pipeline.planner.timing import ThroughputEstimate, max_throughput

# FP8 and FP4 rows: NVIDIA's FP8/NVFP4 checkpoints with an FP8 KV cache; FP16/BF16: a 16-bit KV cache.
_PUBLISHED_PRECISIONS = {"FP8": ("fp8", "fp8"), "FP4": ("nvfp4", "fp8"), "FP16": ("fp16", "auto"), "BF16": ("bf16", "auto")}
PUBLISHED_KV_FRACTION = 0.95  # the perf-overview runs use --kv_cache_free_gpu_mem_fraction 0.95
BACKENDS = ("tensorrt", "pytorch")


def published_rows(backend: str | None = None) -> list[dict[str, str]]:
    """Rows of pipeline/data/trtllm_published_throughput.tsv (tokens_per_s is the TP group's total), one backend or all."""
    text = resources.files("pipeline.data").joinpath("trtllm_published_throughput.tsv").read_text(encoding="utf-8")
    rows = fact_rows(text)
    if backend is not None and backend not in BACKENDS:
        raise InvalidInputError(f"Unknown backend {backend!r}.", hint=f"Use one of: {', '.join(BACKENDS)}.")
    return [row for row in rows if backend is None or row["backend"] == backend]


@lru_cache(maxsize=None)
def published_model(name: str) -> ModelSpec:
    """The shapes of a model named in the published table (pipeline/data/published_models/<name>.json)."""
    import json

    folder = resources.files("pipeline.data").joinpath("published_models")
    path = folder.joinpath(f"{name}.json")
    if not path.is_file():
        known = sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json"))
        raise InvalidInputError(f"No shapes for published model {name!r}.", hint=f"Known: {', '.join(known)}.")
    return model_spec_from_dict(json.loads(path.read_text(encoding="utf-8")), name, source=str(path))


def published_scenario(model: ModelSpec, row: dict[str, Any]) -> Scenario:
    """The Scenario of one published row (gpu, precision, tp, isl, osl)."""
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
    model: ModelSpec | None, rows: list[dict[str, str]], *, efficiency: Efficiency | None = None
) -> list[dict[str, Any]]:
    """Predicted vs published output tokens/s (the TP group's total) for rows of the published table.
    model None: each row's own model (its `model` column); efficiency None: the row's backend's constants."""
    out = []
    for row in rows:
        spec = model or published_model(row["model"])
        backend = row.get("backend") or "tensorrt"
        estimate = trtllm_bench_throughput(published_scenario(spec, row), efficiency=efficiency or efficiency_for(backend))
        published = float(row["tokens_per_s"])
        out.append({
            "backend": backend, "trtllm_version": row.get("trtllm_version", ""), "model": spec.name, "gpu": row["gpu"], "tp": int(row["tp"]), "precision": row["precision"],
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
