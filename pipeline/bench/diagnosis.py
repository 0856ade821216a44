"""Operator hints drawn from the measurements. Each hint names the measurement it comes from, so a
reader can check it; none is emitted without the numbers that justify it. Pure functions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from pipeline.bench.metrics import kv_cache_usage

QUEUE_DOMINATES = 1.0  # queue time per request above compute time per request
KV_NEAR_FULL = 0.9
SCALING_HEADROOM = 0.6  # throughput grew by at least this fraction of the concurrency ratio
TTFT_SUPERLINEAR = 1.5  # TTFT grew this much faster than ISL


@dataclass(frozen=True)
class Hint:
    finding: str
    measurement: str
    action: str


def diagnose(levels: Sequence[dict[str, Any]], servers: Sequence[dict[str, Any] | None],
             prefill_decode: dict[str, Any] | None = None) -> list[Hint]:
    hints: list[Hint] = []
    hints += _errors(levels)
    hints += _queueing(levels, servers)
    hints += _kv_cache(levels, servers)
    hints += _scaling(levels)
    if prefill_decode:
        hints += _ttft_vs_isl(prefill_decode)
    return hints


def _errors(levels: Sequence[dict[str, Any]]) -> list[Hint]:
    bad = [lv for lv in levels if lv["errors"]]
    if not bad:
        return []
    worst = max(bad, key=lambda lv: lv["error_rate"])
    message = next(iter(worst["error_messages"]), "")
    return [Hint(
        finding=f"{sum(lv['errors'] for lv in bad)} request(s) failed",
        measurement=f"error_rate {worst['error_rate']:.1%} at {worst['load']} (first error: {message[:120]})",
        action="Read the errors in the JSON report; timeouts under load mean the server is saturated "
               "(lower the load or add capacity), input errors mean the prompt/OSL exceed the engine's limits.",
    )]


def _queueing(levels, servers) -> list[Hint]:
    for level in reversed(list(levels)):  # the runtime's own timestamps see the in-flight batcher's queue
        wait, ttft = (level.get("server_queue_ms") or {}).get("p50"), (level.get("server_ttft_ms") or {}).get("p50")
        if wait is not None and ttft and wait > 0.5 * ttft and wait >= 1.0:
            return [Hint(
                finding="requests wait for a batch slot longer than their prefill takes",
                measurement=f"server first_scheduled - arrival p50 {wait:.1f} ms of server TTFT p50 {ttft:.1f} ms "
                            f"at {level['load']} (return_perf_metrics)",
                action="Raise max_batch_size (and max_num_tokens) or add replicas: the in-flight batcher is full.",
            )]
    for level, server in reversed(list(zip(levels, servers))):
        if not server or not server.get("models"):
            continue
        # the model with the most queue time is the bottleneck's door
        name, stats = max(server["models"].items(), key=lambda kv: kv[1]["queue_ms_per_request"])
        queue, compute = stats["queue_ms_per_request"], stats["compute_ms_per_request"]
        if queue > QUEUE_DOMINATES * max(compute, 1e-6) and queue >= 1.0:
            return [Hint(
                finding=f"requests wait longer in {name}'s queue than it computes",
                measurement=f"{name} at {level['load']}: nv_inference_queue_duration_us {queue:.1f} ms/request "
                            f"vs nv_inference_compute_* {compute:.1f} ms/request",
                action="Add model instances or replicas, or raise max_batch_size (and max_num_tokens) so more "
                       "requests are batched instead of queued.",
            )]
        return []
    return []


def _kv_cache(levels, servers) -> list[Hint]:
    for level, server in zip(levels, servers):
        if not server:
            continue
        usage = kv_cache_usage(server.get("trt_llm", {}))
        if usage is not None and usage >= KV_NEAR_FULL:
            return [Hint(
                finding="the KV cache ran (nearly) full",
                measurement=f"nv_trt_llm_kv_cache_block_metrics used/max peaked at {usage:.0%} at {level['load']}",
                action="Raise kv_cache_free_gpu_mem_fraction, use an FP8 KV cache, or add tensor parallelism "
                       "so more sequences fit without queueing or eviction.",
            )]
    return []


def _scaling(levels) -> list[Hint]:
    sweep = sorted((lv for lv in levels if lv.get("concurrency") and lv["completed"]), key=lambda lv: lv["concurrency"])
    if not sweep:
        return []
    low, high = sweep[0], sweep[-1]
    if high["concurrency"] == low["concurrency"]:
        if low["concurrency"] <= 2:
            return [Hint(
                finding="only low concurrency was measured",
                measurement=f"output {low['output_tok_s']:.1f} tok/s at {low['load']}",
                action="Batch more: in-flight batching pays off with many concurrent requests; sweep "
                       "--concurrency 1,2,4,8,16 to find the knee.",
            )]
        return []
    ratio = high["concurrency"] / low["concurrency"]
    gain = high["output_tok_s"] / max(low["output_tok_s"], 1e-9)
    if gain >= SCALING_HEADROOM * ratio:
        return [Hint(
            finding="throughput still scales with concurrency: the server is not saturated",
            measurement=f"output tok/s x{gain:.1f} from {low['load']} ({low['output_tok_s']:.1f}) to "
                        f"{high['load']} ({high['output_tok_s']:.1f}) for x{ratio:g} the load",
            action="Batch more: serve with more concurrent requests (and a max_batch_size that allows them) "
                   "before buying hardware; low-concurrency throughput is latency-bound.",
        )]
    ttft_low, ttft_high = low["ttft_ms"]["p50"], high["ttft_ms"]["p50"]
    if ttft_low and ttft_high and ttft_high > 3 * ttft_low:
        return [Hint(
            finding="more load mostly adds waiting: throughput flattened while TTFT grew",
            measurement=f"output tok/s x{gain:.1f} but TTFT p50 {ttft_low:.1f} -> {ttft_high:.1f} ms from "
                        f"{low['load']} to {high['load']}",
            action="The server is saturated: more replicas/GPUs, a faster precision (FP8), or a smaller "
                   "max_batch_size if latency matters more than throughput.",
        )]
    return []


def _ttft_vs_isl(pd: dict[str, Any]) -> list[Hint]:
    points = [p for p in pd.get("isl_sweep", []) if p.get("ttft_ms_p50")]
    if len(points) < 2:
        return []
    first, last = points[0], points[-1]
    isl_ratio = last["isl"] / first["isl"]
    ttft_ratio = last["ttft_ms_p50"] / first["ttft_ms_p50"]
    if ttft_ratio > TTFT_SUPERLINEAR * isl_ratio:
        return [Hint(
            finding="TTFT grows faster than the prompt length",
            measurement=f"TTFT p50 x{ttft_ratio:.1f} ({first['ttft_ms_p50']:.1f} -> {last['ttft_ms_p50']:.1f} ms) "
                        f"for ISL x{isl_ratio:g} ({first['isl']} -> {last['isl']})",
            action="Enable chunked context (enable_chunked_context) and the paged context FMHA "
                   "(--use_paged_context_fmha) so long prompts do not pay quadratic attention at once.",
        )]
    return []
