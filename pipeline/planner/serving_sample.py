"""TensorRT-LLM serving measured on silicon at a fixed concurrency (data/aiconfigurator_silicon_serving.tsv: the sample
NVIDIA ships in AIConfigurator; Llama 3.1 70B on B200 and H200 and Qwen3 32B on H100 at TP 1-8 and 4-128 concurrent
requests, and a few Qwen3 32B runs of a later release on H100 and GB200; and, added after the fit first read those, which
no fit reads, Llama 3.1 8B in BF16 on H100): mean TTFT and TPOT.

The throughput tables check max load only; these check what the SLO search predicts at a concurrency. Their TPOT also
pins what the max-load rows cannot: how much of a decode step is weight reads and how much a cost per iteration, so the
PyTorch backend's fit adds it at a tenth of the throughput rows' weight, and its cross-validation predicts each held-out
GPU's or model's rows here too (scripts/plan_vs_published.py; scripts/plan_vs_silicon_serving.py). Each row is planned
as the PyTorch backend that served it (AIConfigurator's TensorRT-LLM templates run `backend: pytorch`), on the build the
sample does not spell out taken as TensorRT-LLM's defaults: max_batch_size the concurrency, max_num_tokens 8192, no
chunked prefill, the KV cache at memory fraction 0.9 (FP8 unless the row names another).
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Callable

from pipeline.data import packaged_fact_rows
from pipeline.planner.published import published_model, published_scenario
from pipeline.planner.rates import Efficiency
from pipeline.planner.recommend import recommend
from pipeline.planner.scenario import Scenario
from pipeline.planner.slo import latency
from pipeline.planner.timing import closed_loop_run

TABLE = "aiconfigurator_silicon_serving.tsv"
# the sample's grid of a model added after the fit first read TABLE (Llama 3.1 8B in BF16 on H100): no fit reads it
MORE_TABLE = "aiconfigurator_silicon_serving_more.tsv"
MAX_NUM_TOKENS = 8192  # TensorRT-LLM's default (BuildConfig.max_num_tokens)
KV_FRACTION = 0.9  # TensorRT-LLM's default kv_cache_free_gpu_mem_fraction
METRICS = ("tpot", "ttft")


def serving_rows(gpu: str | None = None) -> list[dict[str, str]]:
    """The sample's rows the PyTorch backend's fit reads (of one GPU)."""
    return [row for row in packaged_fact_rows(TABLE) if gpu is None or row["gpu"] == gpu]


def more_serving_rows() -> list[dict[str, str]]:
    """The sample's rows of a model added after that fit (MORE_TABLE), which no fit reads."""
    return packaged_fact_rows(MORE_TABLE)


def serving_scenario(row: dict[str, str]) -> Scenario:
    """The row's deployment; its KV cache the row's where it names one (MORE_TABLE), else FP8."""
    return published_scenario(published_model(row["model"]), {**row, "kv_cache": row.get("kv_cache") or "fp8"})


def serving_build(scenario: Scenario, concurrency: int) -> dict[str, Any]:
    """The build a row ran, as far as the sample says: its concurrency as max_batch_size, the rest TensorRT-LLM's defaults."""
    return {**recommend(scenario, "throughput"), "max_batch_size": concurrency, "max_num_tokens": MAX_NUM_TOKENS,
            "kv_cache_free_gpu_mem_fraction": KV_FRACTION, "chunked_prefill": False}


def tpot_loss_over(rows: list[dict[str, str]]) -> Callable[[Efficiency], float]:
    """The sum over these rows of log(predicted TPOT / measured)^2 as a function of the constants alone (each row's
    iterations laid out once, as published.loss_over does for the throughput rows)."""
    runs = []
    for row in rows:
        scenario = serving_scenario(row)
        concurrency = int(row["concurrency"])
        runs.append((closed_loop_run(scenario, concurrency, serving_build(scenario, concurrency)), float(row["tpot_ms"]) / 1e3))

    def loss(efficiency: Efficiency) -> float:
        return sum(math.log(run.mean_step(efficiency).total_s / measured) ** 2 for run, measured in runs)
    return loss


def _pct(predicted: float, measured: float) -> float:
    return round(100 * (predicted - measured) / measured, 1)


def compare_serving(rows: list[dict[str, str]], efficiency: Efficiency) -> list[dict[str, Any]]:
    """Each row beside the planner's p50 TTFT and TPOT (planner.slo.latency) and AIConfigurator's estimate; `queued`: not
    every request fits the KV cache at once, so TTFT grows by whole waves of requests."""
    out = []
    for row in rows:
        scenario = serving_scenario(row)
        concurrency = int(row["concurrency"])
        predicted = latency(scenario, concurrency, serving_build(scenario, concurrency), efficiency)
        entry: dict[str, Any] = {key: row[key] for key in ("model", "gpu", "precision", "trtllm_version")}
        entry.update({key: int(row[key]) for key in ("tp", "isl", "osl", "concurrency")})
        entry["queued"] = concurrency > predicted.batch
        for metric in METRICS:
            measured, ours = float(row[f"{metric}_ms"]), getattr(predicted, f"{metric}_p50_ms")
            aic = row.get(f"aiconfigurator_{metric}_ms")
            entry[metric] = {"measured": measured, "predicted": ours, "error_pct": _pct(ours, measured),
                             "aiconfigurator": float(aic) if aic else None,
                             "aiconfigurator_error_pct": _pct(float(aic), measured) if aic else None}
        out.append(entry)
    return out


def error_stats(errors: list[float]) -> dict[str, Any]:
    """Median and worst |error| % and mean signed error % of these errors ({"rows": 0} without any)."""
    if not errors:
        return {"rows": 0}
    return {"rows": len(errors), "median_abs_pct_error": round(statistics.median(abs(e) for e in errors), 1),
            "max_abs_pct_error": max(abs(e) for e in errors), "mean_signed_pct": round(statistics.fmean(errors), 1)}


def serving_error_summary(compared: list[dict[str, Any]], metric: str) -> dict[str, Any]:
    """Ours and AIConfigurator's error_stats on `metric` ("tpot" or "ttft") over rows of compare_serving (AIConfigurator's
    over the rows it answered)."""
    return {"ours": error_stats([r[metric]["error_pct"] for r in compared]),
            "aiconfigurator": error_stats([r[metric]["aiconfigurator_error_pct"] for r in compared
                                           if r[metric]["aiconfigurator_error_pct"] is not None])}
