"""`pipeline bench`: latency/throughput through tritonclient streaming (Triton ensemble/BLS or LLM-API) or an
OpenAI-compatible server's SSE streams; SLO gates, reports and plots."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from pipeline.cli._options import EndpointOpt, JsonOpt, OutDirOpt, ServedModelOpt, UrlOpt, one_of, set_json
from pipeline.core.errors import InvalidInputError
from pipeline.core.output import OUT, simple_table

ConcurrencyOpt = Annotated[str, typer.Option("--concurrency", help="Concurrency levels to sweep, e.g. 1,2,4,8,16.")]
RateOpt = Annotated[Optional[str], typer.Option("--rate", help="Request-rate mode: requests/s, one or more (e.g. 2 or 1,2,4); replaces the sweep.")]
ArrivalOpt = Annotated[str, typer.Option("--arrival", parser=one_of("--arrival", ("poisson", "constant")), help="Arrivals in rate mode: poisson or constant.")]
RequestsOpt = Annotated[Optional[int], typer.Option("--requests", min=1, help="Requests per level (default 4 per concurrent slot, at least 8).")]
DurationOpt = Annotated[Optional[float], typer.Option("--duration", min=0.001, help="Seconds per level (no request starts after it).")]
WarmupCountOpt = Annotated[int, typer.Option("--warmup", min=0, help="Warm-up requests before measuring (excluded).")]
IslOpt = Annotated[str, typer.Option("--isl", help="Input tokens MEAN[:STD] (exact, with the model's tokenizer).")]
OslOpt = Annotated[str, typer.Option("--osl", help="Output tokens MEAN[:STD] (forced with min_tokens).")]
DatasetOpt = Annotated[Optional[str], typer.Option("--dataset", help="chat, summarization, code (built-in sets) or a JSONL FILE: {\"text_input\": ...} or an OpenAI chat log {\"messages\": [...]} per line, optional \"max_tokens\".")]
SpeculativeOpt = Annotated[bool, typer.Option("--speculative", help="--url serves speculation: run the same workload on --baseline too; acceptance, speedup per concurrency, break-even.")]
BaselineOpt = Annotated[Optional[str], typer.Option("--baseline", help="URL of the same model served without speculation (implies --speculative).")]
BaselineModelOpt = Annotated[Optional[str], typer.Option("--baseline-model", help="Model to bench at --baseline (default: --model).")]
TokenizerOpt = Annotated[Optional[Path], typer.Option("--tokenizer", help="Tokenizer folder (default: the served preprocessing model's tokenizer_dir).")]
SloOpt = Annotated[Optional[List[str]], typer.Option("--slo", help="Gate NAME=VALUE (repeat): ttft_p99_ms, tpot_p99_ms, latency_p95_ms, error_rate, output_tok_s.")]
MetricsUrlOpt = Annotated[Optional[str], typer.Option("--metrics-url", help="Prometheus endpoint (default http://HOST:8002/metrics when --url uses 8001).")]
PrefillDecodeOpt = Annotated[bool, typer.Option("--prefill-decode", help="Sweep ISL at fixed OSL and OSL at fixed ISL (concurrency 1).")]
PdIslOpt = Annotated[str, typer.Option("--pd-isl", help="ISL points of --prefill-decode.")]
PdOslOpt = Annotated[str, typer.Option("--pd-osl", help="OSL points of --prefill-decode.")]
PerfMetricsOpt = Annotated[bool, typer.Option("--perf-metrics", help="Ask for the server's timestamps (return_perf_metrics) and compare TTFTs.")]
TimeoutOpt = Annotated[float, typer.Option("--request-timeout", min=0.1, help="Seconds before a request counts as a timeout error.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of the synthetic workload and Poisson arrivals.")]
BenchGpuOpt = Annotated[Optional[str], typer.Option("--gpu", help="GPU key: print the planner's prediction beside the measurement.")]
LoraMixOpt = Annotated[Optional[str], typer.Option("--lora-mix", help="Share of requests per adapter, e.g. sql=0.5,chat=0.3,"
                      "base=0.2 (base: no adapter; a name of digits is a task id); reports each class against base.")]
LoraSourceOpt = Annotated[Optional[Path], typer.Option("--lora-source", help="Engine folder, bundle or deployable whose "
                          "manifest maps --lora-mix names to task ids (and trtllm-serve's lora_path).")]
BenchQuantOpt = Annotated[Optional[str], typer.Option("--quant", help="Precision for the prediction (with --gpu).")]


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InvalidInputError(f"{what} {text!r} is not a list of integers.", hint=f"e.g. {what} 1,2,4,8") from None
    if not values:
        raise InvalidInputError(f"{what} is empty.", hint=f"e.g. {what} 1,2,4,8")
    return values


def _floats(text: str, what: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InvalidInputError(f"{what} {text!r} is not a list of numbers.", hint=f"e.g. {what} 1,2,4") from None


def bench(
    url: UrlOpt = "127.0.0.1:8001",
    model: ServedModelOpt = None,
    endpoint: EndpointOpt = "chat",
    concurrency: ConcurrencyOpt = "1,2,4,8",
    rate: RateOpt = None,
    arrival: ArrivalOpt = "poisson",
    requests: RequestsOpt = None,
    duration: DurationOpt = None,
    warmup: WarmupCountOpt = 2,
    isl: IslOpt = "128",
    osl: OslOpt = "32",
    dataset: DatasetOpt = None,
    tokenizer: TokenizerOpt = None,
    slo: SloOpt = None,
    metrics_url: MetricsUrlOpt = None,
    prefill_decode: PrefillDecodeOpt = False,
    pd_isl: PdIslOpt = "32,64,128,256,512",
    pd_osl: PdOslOpt = "8,16,32,64,128",
    perf_metrics: PerfMetricsOpt = False,
    request_timeout: TimeoutOpt = 600.0,
    seed: SeedOpt = 0,
    gpu: BenchGpuOpt = None,
    quant: BenchQuantOpt = None,
    lora_mix: LoraMixOpt = None,
    lora_source: LoraSourceOpt = None,
    speculative: SpeculativeOpt = False,
    baseline: BaselineOpt = None,
    baseline_model: BaselineModelOpt = None,
    out: OutDirOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Measure TTFT, TPOT, latency and throughput of a served model; gate on SLOs (exit 4 when one fails)."""
    from pipeline.bench import BenchEvents, BenchSpec, Dist, parse_slo, run_bench
    from pipeline.bench.datasets import resolve_dataset
    from pipeline.bench.speculative import run_speculative_bench
    from pipeline.bench.gates import FAILED_COLUMNS, failed_rows, require_pass
    from pipeline.bench.lora_mix import parse_lora_mix

    set_json(json_output)
    spec = BenchSpec(
        url=url, model=model, endpoint=endpoint, concurrency=_ints(concurrency, "--concurrency"),
        rate=_floats(rate, "--rate") if rate else (), arrival=arrival, requests=requests, duration_s=duration,
        warmup=warmup, isl=Dist.parse(isl, what="--isl"), osl=Dist.parse(osl, what="--osl"),
        dataset=resolve_dataset(dataset) if dataset else None, speculative=speculative or baseline is not None,
        baseline=baseline, baseline_model=baseline_model,
        tokenizer=tokenizer, slo=tuple(parse_slo(s) for s in slo or ()), out=out, metrics_url=metrics_url, seed=seed,
        request_timeout_s=request_timeout, perf_metrics=perf_metrics, prefill_decode=prefill_decode,
        pd_isl=_ints(pd_isl, "--pd-isl"), pd_osl=_ints(pd_osl, "--pd-osl"), gpu=gpu, quant=quant,
        lora_mix=parse_lora_mix(lora_mix) if lora_mix else (), lora_source=lora_source,
    )
    with OUT.progress() as progress:
        task = {"id": None}

        def on_level(load) -> None:
            if task["id"] is not None:
                progress.update(task["id"], visible=False)
            task["id"] = progress.add_task(f"bench {load.label}", total=load.requests)

        def on_done(_record) -> None:
            if task["id"] is not None:
                progress.advance(task["id"])

        events = BenchEvents(on_level=on_level, on_done=on_done)
        if spec.speculative:
            compared = run_speculative_bench(spec, events=events)
        else:
            result = run_bench(spec, events=events)
    if spec.speculative:
        _print_speculative(compared)
        return
    for note in result.notes:
        OUT.warn(note)
    _print(result)
    if result.failed_gates:
        OUT.stderr.print(simple_table("SLO gates that failed", list(FAILED_COLUMNS), failed_rows(result.failed_gates)))
    require_pass(result.failed_gates, result.out_dir)


def _print(result) -> None:
    from pipeline.bench.report import TERMINAL_COLUMNS, terminal_rows

    table = simple_table(f"{result.served_model} at {result.spec.url}", TERMINAL_COLUMNS, terminal_rows(result.levels))
    lines = [f"- {h.finding} ({h.measurement}): {h.action}" for h in result.hints]
    text = ("Diagnosis:\n" + "\n".join(lines) if lines else "Diagnosis: nothing stands out.") + f"\nReports: {result.out_dir}"
    if result.prediction:
        text = "Planner prediction (measured / predicted): " + "; ".join(
            f"{p['load']} TTFT {p['ttft_ms'] or 0:.1f}/{p['pred_ttft_ms']:.1f} ms, TPOT {p['tpot_ms'] or 0:.2f}/{p['pred_tpot_ms']:.2f} ms"
            for p in result.prediction) + "\n" + text
    if result.planned:
        text = "Built for SLO (measured / predicted): " + "; ".join(
            f"{p['load']} " + ", ".join(f"{k} {p['measured'][k] or 0:.1f}/{p['predicted'][k]:.1f}" for k in p["slo"])
            + f" -> {'pass' if p['slo_measured_pass'] else 'FAIL'} (predicted {'pass' if p['slo_predicted_pass'] else 'fail'})"
            for p in result.planned) + "\n" + text
    summary = {"out_dir": result.out_dir, "levels": result.levels, "server": result.servers,
               "prefill_decode": result.prefill_decode, "diagnosis": result.hints, "slo": result.gates,
               "prediction": result.prediction, "planned": result.planned}
    from pipeline.bench.lora_mix import ROW_COLUMNS, class_rows

    rows = class_rows(result.levels)
    if rows:  # --lora-mix: each adapter against base requests
        OUT.stderr.print(simple_table("LoRA adapters against base", ROW_COLUMNS, rows))
    OUT.result(summary, table=table, text=text)


def _print_speculative(result) -> None:
    def f(value, digits: int = 2) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    rows = [[str(r["concurrency"]), f(r["acceptance_rate"]), f(r["tokens_per_step"]), f"{f(r['ttft_ms_base'], 1)} / {f(r['ttft_ms_spec'], 1)}",
             f"{f(r['tpot_ms_base'])} / {f(r['tpot_ms_spec'])}", f"{f(r['output_tok_s_base'], 1)} / {f(r['output_tok_s_spec'], 1)}",
             f(r["speedup"])] for r in result.levels]
    table = simple_table(f"speculation at {result.spec.url} vs {result.spec.baseline}",
                         ["c", "acceptance", "tokens/step", "TTFT p50 ms base/spec", "TPOT p50 ms base/spec",
                          "out tok/s base/spec", "speedup"], rows)
    for note in result.notes:
        OUT.warn(note)
    where = ("pays at every measured concurrency" if result.break_even is None
             else f"break-even concurrency {result.break_even}: speculation stops paying there")
    OUT.result(result.as_dict(), table=table, text=f"Speculation {where}.\nReports: {result.out_dir}")
