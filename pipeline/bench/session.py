"""run_bench(spec): ask the server about the model, build the workload, warm up, run each level
with the metrics endpoint scraped around it, count tokens, summarise, diagnose, gate, report."""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pipeline.bench import metrics as M
from pipeline.bench.deployment import deployment, planned_beside_measured
from pipeline.bench.diagnosis import Hint, diagnose
from pipeline.bench.gates import GateResult, check_gates
from pipeline.bench.runner import LevelRun, Load, RequestRecord, Runner
from pipeline.bench.spec import BenchSpec, Dist
from pipeline.bench.stats import linear_fit
from pipeline.bench.lora_mix import assign, class_summaries, resolve_classes
from pipeline.bench.transport import LlmApiTransport, ModelInfo, Transport, TritonTransport, model_info
from pipeline.bench.workload import (BenchRequest, count_tokens, cycle, dataset_requests, load_tokenizer,
                                     synthetic_requests)
from pipeline.core.errors import InvalidInputError
from pipeline.clients.openai import parse_url
from pipeline.core.paths import build_root, model_slug
from pipeline.planner import Scenario, predict

SCRAPE_EVERY_S = 1.0
DURATION_POOL = 256  # distinct prompts cycled through when a level is bounded by duration only


@dataclass
class BenchResult:
    spec: BenchSpec
    served_model: str
    tokenizer_dir: Path | None
    levels: list[dict[str, Any]] = field(default_factory=list)
    requests: list[list[M.RequestMetrics]] = field(default_factory=list)
    servers: list[dict[str, Any] | None] = field(default_factory=list)
    prefill_decode: dict[str, Any] | None = None
    hints: list[Hint] = field(default_factory=list)
    gates: list[GateResult] = field(default_factory=list)
    prediction: list[dict[str, Any]] | None = None
    deployment: dict[str, Any] | None = None  # the engine folder served (pipeline/bench/deployment.py)
    planned: list[dict[str, Any]] | None = None  # its SLO plan's prediction beside the measurement
    notes: list[str] = field(default_factory=list)
    out_dir: Path | None = None
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def failed_gates(self) -> list[GateResult]:
        return [g for g in self.gates if not g.passed]

    def as_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec, "served_model": self.served_model, "tokenizer_dir": self.tokenizer_dir,
            "levels": [{**lv, "per_request": reqs} for lv, reqs in zip(self.levels, self.requests)],
            "server": self.servers, "prefill_decode": self.prefill_decode, "diagnosis": self.hints,
            "slo": self.gates, "prediction": self.prediction, "deployment": self.deployment, "planned": self.planned,
            "notes": self.notes, "files": self.files,
        }


def default_metrics_url(url: str) -> str | None:
    """Triton's default metrics port only when the gRPC port is Triton's default too."""
    if url.startswith(("http://", "https://")):
        return None
    host, _, port = url.rpartition(":")
    return f"http://{host or '127.0.0.1'}:8002/metrics" if port == "8001" else None


def served_model_info(spec: BenchSpec) -> ModelInfo:
    """The served model, whichever contract it speaks (pipeline.clients.contract.detect): ensemble-contract models go
    through model_info as before; the LLM-API model and OpenAI servers are described from what detect read."""
    from pipeline.clients.contract import detect

    served = detect(spec.url, spec.model, endpoint=spec.endpoint)
    if served.kind == "triton-ensemble":
        return model_info(served.url, served.model)
    return ModelInfo(name=served.model, inputs=served.inputs, batched=served.batched, tokenizer_dir=served.tokenizer_dir,
                     contract=served.kind, decoupled=served.decoupled is not False)


def make_transport(spec: BenchSpec, info: ModelInfo, result: "BenchResult") -> Callable[[], Transport]:
    """The transport of the model's contract, as a factory to call inside the event loop (the gRPC aio
    client binds to the running loop); what it cannot measure or force goes to result.notes."""
    if info.contract == "openai":
        from pipeline.bench.openai_transport import OpenAITransport, supports_min_tokens

        forced = False
        if not spec.dataset:
            forced, message = supports_min_tokens(spec.url.rstrip("/"), info.name, spec.endpoint)
            if not forced:
                result.notes.append(f"The server refuses min_tokens ({message[:160]}): output lengths are not forced, so "
                                    "runs with different OSL are not comparable.")
        if spec.perf_metrics:
            result.notes.append("--perf-metrics: an OpenAI server reports no per-request timestamps; client times only.")
        result.notes.append(f"OpenAI {spec.endpoint} endpoint: OSL is the server's usage.completion_tokens (the tokenizer "
                            "count of the text where a server reports none), ISL is usage.prompt_tokens"
                            + (" (the chat template the server applies included)." if spec.endpoint == "chat" else "."))
        return lambda: OpenAITransport(spec.url.rstrip("/"), info.name, endpoint=spec.endpoint, min_tokens=forced)
    if info.contract == "triton-llmapi":
        if not spec.dataset:
            result.notes.append(f"{info.name} (LLM-API contract) has no min_tokens input: output lengths are not forced.")
        if not info.decoupled:
            result.notes.append(f"{info.name} is not decoupled: one whole response per request, so TTFT equals latency "
                                "and TPOT is undefined (render the repository decoupled to stream).")
        return lambda: LlmApiTransport(spec.url, info, perf_metrics=spec.perf_metrics, timeout_s=None)
    if not spec.dataset and "min_tokens" not in info.inputs:
        result.notes.append(f"{info.name} has no min_tokens input: output lengths are not forced, so runs with "
                            "different OSL are not comparable (render the repository with min_tokens).")
    return lambda: TritonTransport(spec.url, info, perf_metrics=spec.perf_metrics, timeout_s=None)


def resolve_tokenizer(spec: BenchSpec, info: ModelInfo) -> Path:
    path = spec.tokenizer or info.tokenizer_dir
    if path is None or not Path(path).is_dir():
        found = f" (the server's preprocessing says {info.tokenizer_dir}, which is not a folder here)" if info.tokenizer_dir else ""
        raise InvalidInputError(f"No tokenizer for {info.name!r}{found}.",
                                hint="Pass --tokenizer DIR: the served model's Hugging Face folder; ISL/OSL are counted with it.")
    return Path(path)


def plan_loads(spec: BenchSpec) -> list[Load]:
    if spec.rate:
        return [Load(rate=r, arrival=spec.arrival, requests=spec.level_requests(max(1, math.ceil(r))),
                     duration_s=spec.duration_s) for r in spec.rate]
    return [Load(concurrency=c, requests=spec.level_requests(c), duration_s=spec.duration_s) for c in spec.concurrency]


class LevelDriver:
    """Runs levels on one Runner, scraping the metrics endpoint before, during (peaks) and after."""

    def __init__(self, runner: Runner, metrics_url: str | None, scrape: Callable = M.scrape) -> None:
        self.runner = runner
        self.metrics_url = metrics_url
        self.scrape = scrape

    async def _poll(self, peaks: dict, stop: asyncio.Event) -> None:
        while not stop.is_set():
            M.merge_peaks(peaks, await asyncio.to_thread(self.scrape, self.metrics_url))
            try:
                await asyncio.wait_for(stop.wait(), SCRAPE_EVERY_S)
            except asyncio.TimeoutError:
                pass

    async def level(self, load: Load, requests) -> tuple[LevelRun, dict[str, Any] | None]:
        if not self.metrics_url:
            return await self.runner.run(load, requests), None
        before = await asyncio.to_thread(self.scrape, self.metrics_url)
        peaks: dict = {}
        stop = asyncio.Event()
        poller = asyncio.ensure_future(self._poll(peaks, stop))
        try:
            run = await self.runner.run(load, requests)
        finally:
            stop.set()
            await poller
        after = await asyncio.to_thread(self.scrape, self.metrics_url)
        M.merge_peaks(peaks, after)
        return run, M.server_delta(before, after, peaks)


def finish_level(run: LevelRun, tokenizer: Any) -> tuple[dict[str, Any], list[M.RequestMetrics]]:
    """Count output tokens (after the run, off the hot path) and summarise."""
    ok = [r for r in run.records if r.ok]
    uncounted = [r for r in ok if r.output_tokens is None]  # the server's own count (OpenAI usage) wins
    counts = dict(zip((r.index for r in uncounted), count_tokens(tokenizer, [r.text for r in uncounted])))
    counts.update({r.index: r.output_tokens for r in ok if r.output_tokens is not None})
    metrics = [M.request_metrics(r, counts.get(r.index)) for r in run.records]
    return M.level_summary(run, metrics), metrics


async def measure(spec: BenchSpec, driver: LevelDriver, tokenizer: Any, pool: list[BenchRequest], result: BenchResult,
                  on_level: Callable[[Load], None] | None = None) -> None:
    """Warm up, then every level of the spec (or the prefill/decode sweep) on driver, appending to result."""
    if spec.warmup:
        warm = list(cycle(pool, spec.warmup, start=-spec.warmup))
        await driver.runner.warmup(warm, concurrency=min(spec.warmup, max(spec.concurrency)))

    async def level(load: Load, requests, label: str | None = None) -> dict[str, Any]:
        if on_level:
            on_level(load)
        run, server = await driver.level(load, requests)
        summary, per_request = finish_level(run, tokenizer)
        if spec.lora_mix:
            summary["adapters"] = class_summaries(per_request, {r.index: r.adapter for r in run.records}, summary["duration_s"])
        if label:
            summary["load"] = label
        result.levels.append(summary)
        result.requests.append(per_request)
        result.servers.append(server)
        return summary

    if not spec.prefill_decode:
        for load in plan_loads(spec):
            await level(load, cycle(pool, load.requests))
        return
    pd = {"fixed_osl": spec.osl.mean, "fixed_isl": spec.isl.mean, "isl_sweep": [], "osl_sweep": []}
    for kind, value, requests in prefill_decode_points(spec, tokenizer):
        summary = await level(Load(concurrency=1, requests=len(requests)), iter(requests), f"{kind}={value}")
        pd[f"{kind}_sweep"].append({kind: value, "ttft_ms_p50": summary["ttft_ms"]["p50"],
                                    "tpot_ms_p50": summary["tpot_ms"]["p50"], "latency_ms_p50": summary["latency_ms"]["p50"]})
    isl_pts = [(p["isl"], p["ttft_ms_p50"]) for p in pd["isl_sweep"] if p["ttft_ms_p50"] is not None]
    ctx_pts = [(spec.isl.mean + p["osl"] / 2, p["tpot_ms_p50"]) for p in pd["osl_sweep"] if p["tpot_ms_p50"] is not None]
    isl_fit = linear_fit([x for x, _ in isl_pts], [y for _, y in isl_pts])
    tpot_fit = linear_fit([x for x, _ in ctx_pts], [y for _, y in ctx_pts])
    pd["ttft_ms_per_1k_isl"] = isl_fit[0] * 1000 if isl_fit else None
    pd["tpot_ms_per_1k_context"] = tpot_fit[0] * 1000 if tpot_fit else None
    result.prefill_decode = pd


def prefill_decode_points(spec: BenchSpec, tokenizer: Any) -> list[tuple[str, int, list[BenchRequest]]]:
    n = spec.requests or 4
    points = []
    for i, isl in enumerate(spec.pd_isl):
        points.append(("isl", isl, synthetic_requests(tokenizer, Dist(mean=isl), Dist(mean=spec.osl.mean), n,
                                                      seed=spec.seed + 100 + i)))
    for i, osl in enumerate(spec.pd_osl):
        points.append(("osl", osl, synthetic_requests(tokenizer, Dist(mean=spec.isl.mean), Dist(mean=osl), n,
                                                      seed=spec.seed + 200 + i)))
    return points


def report_dir(spec: BenchSpec, tokenizer_dir: Path | None, served_model: str) -> Path:
    """--out, else build/<model>/reports/ where <model> is the build folder the tokenizer lives in."""
    if spec.out is not None:
        return Path(spec.out)
    root = build_root()
    model = None
    if tokenizer_dir is not None:
        try:
            model = Path(tokenizer_dir).resolve().relative_to(root).parts[0]
        except (ValueError, IndexError):
            model = model_slug(Path(tokenizer_dir).name)
    return root / (model or model_slug(served_model)) / "reports"


def predictions(spec: BenchSpec, result: BenchResult) -> list[dict[str, Any]] | None:
    """The planner's TTFT/TPOT/throughput beside each concurrency level, when --gpu is given: one
    Scenario made from the served model's config and the bench spec, its ISL/OSL set per level."""
    if not spec.gpu or result.tokenizer_dir is None:
        return None
    tok = Path(result.tokenizer_dir)
    # the HF config beside the tokenizer: an HF folder, or a reference engine's model/ folder
    config = next((c for c in (tok / "config.json", tok.parent / "model" / "config.json")
                   if c.is_file() and "num_hidden_layers" in c.read_text(encoding="utf-8")), None)
    if config is None:
        return None
    scenario = Scenario(config, spec.gpu, spec.quant or "fp16", None, 1, spec.isl.mean, spec.osl.mean)
    rows = []
    for lv in result.levels:
        if not lv.get("concurrency") or not lv["completed"]:
            continue
        at_level = scenario.replace(isl=int(lv["isl"]["mean"] or spec.isl.mean), osl=int(lv["osl"]["mean"] or spec.osl.mean))
        p = predict(at_level, lv["concurrency"])
        rows.append({"load": lv["load"], "ttft_ms": lv["ttft_ms"]["p50"], "pred_ttft_ms": p.ttft_ms,
                     "tpot_ms": lv["tpot_ms"]["p50"], "pred_tpot_ms": p.tpot_ms,
                     "output_tok_s": lv["output_tok_s"], "pred_output_tok_s": p.output_tokens_per_s})
    return rows


@dataclass(frozen=True)
class BenchEvents:
    """What run_bench tells its caller as it goes: each level as it starts, each request as it ends
    (the CLI draws its progress bars from them)."""

    on_level: Callable[[Load], None] | None = None
    on_done: Callable[[RequestRecord], None] | None = None


def run_bench(spec: BenchSpec, *, transport: Transport | None = None, info: ModelInfo | None = None,
              tokenizer: Any = None, events: BenchEvents = BenchEvents(), write: bool = True) -> BenchResult:
    """Measure, then write the reports (under build/<model>/reports/bench-<time>/ or --out).

    SLO failures are in result.failed_gates; raising GateFailedError is the caller's choice (the
    CLI does), so that the reports are always written first.
    """
    parse_url(spec.url)
    info = info or served_model_info(spec)
    tokenizer_dir = None
    if tokenizer is None:
        tokenizer_dir = resolve_tokenizer(spec, info)
        tokenizer = load_tokenizer(tokenizer_dir)
    else:
        tokenizer_dir = spec.tokenizer
    result = BenchResult(spec=spec, served_model=info.name, tokenizer_dir=tokenizer_dir)
    sizes = [] if spec.prefill_decode else [load.requests or DURATION_POOL for load in plan_loads(spec)]
    size = max(sizes + [spec.warmup, 1])
    if spec.dataset:
        pool = dataset_requests(spec.dataset, tokenizer, spec.osl, seed=spec.seed)
    else:
        pool = synthetic_requests(tokenizer, spec.isl, spec.osl, min(size, DURATION_POOL * 4), seed=spec.seed)
    if spec.lora_mix:
        pool = assign(pool, resolve_classes(spec.lora_mix, spec.lora_source), spec.seed)
    metrics_url = spec.metrics_url or default_metrics_url(spec.url)
    own = transport is None
    factory = None if transport is not None else make_transport(spec, info, result)
    if metrics_url is None:
        result.notes.append("Server metrics not scraped: pass --metrics-url http://HOST:8002/metrics (Triton), or a "
                            "Prometheus endpoint of the OpenAI server if it has one.")

    async def main() -> None:
        t = transport or factory()
        runner = Runner(t, request_timeout_s=spec.request_timeout_s, on_done=events.on_done)
        try:
            await measure(spec, LevelDriver(runner, metrics_url), tokenizer, pool, result, events.on_level)
        finally:
            if own:
                await t.close()

    asyncio.run(main())
    result.hints = diagnose(result.levels, result.servers, result.prefill_decode)
    result.gates = check_gates(spec.slo, [lv for lv in result.levels])
    result.prediction = predictions(spec, result)
    result.deployment = deployment(tokenizer_dir)
    result.planned = planned_beside_measured(result.deployment, result.levels)
    if write:
        write_run(result, report_dir(spec, tokenizer_dir, info.name))
    return result


def write_run(result: BenchResult, reports: Path) -> Path:
    """reports/bench-<time>/ written atomically (JSON, CSV, Markdown, PNGs, manifest)."""
    from pipeline.core.artifacts import atomic_dir
    from pipeline.bench.plots import plot_all
    from pipeline.bench.report import write_reports

    started = time.time()
    destination = reports / time.strftime("bench-%Y%m%d-%H%M%S")
    with atomic_dir(destination) as tmp:
        files = write_reports(result, tmp)
        files.update(plot_all(result, tmp))
        write_bench_manifest(result.spec, tmp, started)
    result.out_dir = destination
    result.files = {k: destination / Path(v).name for k, v in files.items()}
    return destination


def write_bench_manifest(spec: BenchSpec, folder: Path, started: float) -> None:
    """folder/manifest.json of a bench report (inputs: the spec)."""
    from pipeline.core.artifacts import ArtifactOrigin, build_manifest, sha256_json, write_json_atomic

    inputs = spec.model_dump(mode="json")
    write_json_atomic(folder / "manifest.json", build_manifest(
        ArtifactOrigin("bench", inputs, sha256_json(inputs), ("tritonclient", "aiohttp")), folder, started))
