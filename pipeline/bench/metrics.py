"""From records to numbers, with genai-perf's definitions:

  TTFT      = first response - send
  latency   = last response - send
  TPOT/ITL  = (latency - TTFT) / (OSL - 1)          (undefined for OSL < 2)
  OSL       = tokens of the whole streamed text, counted with the model's tokenizer
  output tokens/s per user = OSL / latency;  total = sum(OSL) / level duration
  requests/s = completed requests / level duration, duration = first send .. last response

Plus the server's own view: Prometheus metrics scraped before and after each level.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Sequence

from pipeline.bench.runner import LevelRun, RequestRecord
from pipeline.bench.stats import summarize

MS = 1000.0


@dataclass(frozen=True)
class RequestMetrics:
    index: int
    ok: bool
    error: str | None
    isl: int
    osl: int | None
    osl_target: int | None
    responses: int
    ttft_ms: float | None
    latency_ms: float | None
    tpot_ms: float | None
    output_tok_s: float | None
    send_unix_ns: int
    server_ttft_ms: float | None = None  # server first_token_time - arrival_time, when reported
    server_queue_ms: float | None = None  # server first_scheduled_time - arrival_time: waiting for a batch slot
    client_minus_server_first_token_ms: float | None = None
    accepted_draft_tokens: int | None = None  # speculation: the server's total_accepted_draft_tokens
    draft_tokens: int | None = None  # and total_draft_tokens, when it reports them (return_perf_metrics)


def request_metrics(record: RequestRecord, osl: int | None) -> RequestMetrics:
    """One record's timings. `osl` is the token count of its text (None when it failed)."""
    ok = record.ok
    ttft = latency = tpot = per_user = None
    if ok:
        ttft = (record.first_t - record.send_t) * MS
        latency = (record.last_t - record.send_t) * MS
        if osl is not None and osl >= 2:
            tpot = (latency - ttft) / (osl - 1)
        if osl and latency > 0:
            per_user = osl / (latency / MS)
    server_ttft = diff = queue = None
    perf = record.perf or {}
    if ok and "first_scheduled_time_ns" in perf and "arrival_time_ns" in perf:
        queue = (perf["first_scheduled_time_ns"] - perf["arrival_time_ns"]) / 1e6
    if ok and "first_token_time_ns" in perf and "arrival_time_ns" in perf:
        server_ttft = (perf["first_token_time_ns"] - perf["arrival_time_ns"]) / 1e6
        # the client's first-response wall time minus the server's first-token wall time
        client_first_ns = record.send_unix_ns + (record.first_t - record.send_t) * 1e9
        diff = (client_first_ns - perf["first_token_time_ns"]) / 1e6
    return RequestMetrics(
        index=record.index, ok=ok, error=record.error, isl=record.isl, osl=osl if ok else None,
        osl_target=record.min_tokens, responses=len(record.chunk_t), ttft_ms=ttft, latency_ms=latency,
        tpot_ms=tpot, output_tok_s=per_user, send_unix_ns=record.send_unix_ns,
        server_ttft_ms=server_ttft, server_queue_ms=queue, client_minus_server_first_token_ms=diff,
        accepted_draft_tokens=_count(perf, "total_accepted_draft_tokens") if ok else None,
        draft_tokens=_count(perf, "total_draft_tokens") if ok else None,
    )


def _count(perf: dict, name: str) -> int | None:
    return int(perf[name]) if name in perf else None


def level_summary(run: LevelRun, metrics: Sequence[RequestMetrics]) -> dict[str, Any]:
    """Counts, rates and the statistics of every per-request metric of one level."""
    good = [m for m in metrics if m.ok]
    ok_records = [r for r in run.records if r.ok]
    if ok_records:
        window = max(r.last_t for r in ok_records) - min(r.send_t for r in run.records)
    else:
        window = run.end_t - run.start_t
    window = max(window, 1e-9)
    total_out = sum(m.osl or 0 for m in good)
    errors = [m for m in metrics if not m.ok]
    return {
        "load": run.load.label,
        "concurrency": run.load.concurrency,
        "rate": run.load.rate,
        "requests": len(metrics),
        "completed": len(good),
        "errors": len(errors),
        "error_rate": (len(errors) / len(metrics)) if metrics else 0.0,
        "duration_s": window,
        "requests_s": len(good) / window,
        "output_tok_s": total_out / window,
        "ttft_ms": summarize(m.ttft_ms for m in good),
        "tpot_ms": summarize(m.tpot_ms for m in good),
        "latency_ms": summarize(m.latency_ms for m in good),
        "output_tok_s_per_user": summarize(m.output_tok_s for m in good),
        "isl": summarize(m.isl for m in metrics),
        "osl": summarize(m.osl for m in good),
        "server_ttft_ms": summarize(m.server_ttft_ms for m in good),
        "server_queue_ms": summarize(m.server_queue_ms for m in good),
        "client_minus_server_first_token_ms": summarize(m.client_minus_server_first_token_ms for m in good),
        "error_messages": _error_counts(errors),
    }


def _error_counts(errors: Sequence[RequestMetrics]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for m in errors:
        key = (m.error or "unknown")[:300]
        counts[key] = counts.get(key, 0) + 1
    return counts


# ---------------------------------------------------------------------------------------------
# Server side: Prometheus text format
# ---------------------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse_prometheus(text: str) -> Samples:
    """{(metric name, sorted label pairs): value} from the Prometheus text exposition format."""
    samples: Samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        labels = tuple(sorted(_LABEL.findall(match.group(2) or "")))
        try:
            samples[(match.group(1), labels)] = float(match.group(3))
        except ValueError:
            continue
    return samples


def scrape(url: str | None, timeout: float = 3.0) -> Samples | None:
    if not url:
        return None
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (operator-given URL)
            return parse_prometheus(response.read().decode("utf-8", errors="replace"))
    except (urllib.error.URLError, OSError, ValueError):
        return None


_QUEUE = "nv_inference_queue_duration_us"
_COMPUTE = ("nv_inference_compute_input_duration_us", "nv_inference_compute_infer_duration_us",
            "nv_inference_compute_output_duration_us")


def server_delta(before: Samples | None, after: Samples | None, peaks: Samples | None = None) -> dict[str, Any] | None:
    """Per model: requests, average queue and compute time per request (from the counters' growth
    over the level); nv_trt_llm_* gauges at the end and at their peak while the level ran."""
    if before is None or after is None:
        return None

    def grew(name: str, model: str) -> float:
        total = 0.0
        for (metric, labels), value in after.items():
            if metric == name and dict(labels).get("model") == model:
                total += value - before.get((metric, labels), 0.0)
        return total

    models = sorted({dict(labels).get("model") for (metric, labels) in after
                     if metric == "nv_inference_request_success" and dict(labels).get("model")})
    per_model = {}
    for model in models:
        success = grew("nv_inference_request_success", model)
        executions = grew("nv_inference_exec_count", model)
        if success <= 0:
            continue
        queue_ms = grew(_QUEUE, model) / 1000.0 / success
        compute_ms = sum(grew(name, model) for name in _COMPUTE) / 1000.0 / success
        per_model[model] = {
            "requests": success,
            "failures": grew("nv_inference_request_failure", model),
            "executions": executions,
            "avg_batch": (grew("nv_inference_count", model) / executions) if executions else None,
            "queue_ms_per_request": queue_ms,
            "compute_ms_per_request": compute_ms,
            "request_ms_per_request": grew("nv_inference_request_duration_us", model) / 1000.0 / success,
        }
    trtllm = {}
    for (metric, labels), value in after.items():
        if metric.startswith("nv_trt_llm_"):
            key = metric + "{" + ",".join(f"{k}={v}" for k, v in labels if k not in ("model", "version")) + "}"
            trtllm[key] = {"end": value, "peak": (peaks or {}).get((metric, labels), value)}
    return {"models": per_model, "trt_llm": trtllm}


def merge_peaks(peaks: Samples, sample: Samples | None, prefix: str = "nv_trt_llm_") -> None:
    """Keep the largest value seen of each nv_trt_llm_* series (mutates peaks: it is the accumulator)."""
    if not sample:
        return
    for key, value in sample.items():
        if key[0].startswith(prefix) and value > peaks.get(key, float("-inf")):
            peaks[key] = value


def kv_cache_usage(trt_llm: dict[str, Any]) -> float | None:
    """Peak used / max KV-cache blocks from nv_trt_llm_kv_cache_block_metrics, when reported."""
    used = next((v["peak"] for k, v in trt_llm.items() if k.startswith("nv_trt_llm_kv_cache_block_metrics")
                 and "kv_cache_block_type=used" in k), None)
    most = next((v["end"] for k, v in trt_llm.items() if k.startswith("nv_trt_llm_kv_cache_block_metrics")
                 and "kv_cache_block_type=max" in k), None)
    if used is None or not most:
        return None
    return used / most

