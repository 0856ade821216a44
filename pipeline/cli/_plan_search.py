"""`pipeline plan --slo ...` and `pipeline plan --calibrate BENCH.json...`: options, the call to the planner's
search (pipeline/planner/search.py) and the printed tables; the command itself is in cli/plan.py (a module without a command: its name starts with `_`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from pipeline.core.errors import InvalidInputError
from pipeline.core.output import OUT, simple_table

SloOpt = Annotated[Optional[str], typer.Option("--slo", help="Search builds for SLOs: ttft_p50_ms, ttft_p99_ms, tpot_p50_ms, tpot_p99_ms, e.g. ttft_p99_ms=500,tpot_p99_ms=40.")]
RateOpt = Annotated[Optional[float], typer.Option("--rate", help="Requests/s to serve (--slo): the replicas needed.")]
GpusOpt = Annotated[Optional[str], typer.Option("--gpus", help="GPUs to search (--slo), e.g. h100,h200,l40s,a100 (default those four).")]
TpsOpt = Annotated[Optional[str], typer.Option("--tp", help="Tensor-parallel size; with --slo a list to search (default 1,2,4).")]
PpsOpt = Annotated[Optional[str], typer.Option("--pp", help="Pipeline-parallel stages, each of --tp GPUs; with --slo a list to search (default 1).")]
BatchSizesOpt = Annotated[Optional[str], typer.Option("--batch-sizes", help="max_batch_size values to search (--slo; default powers of two up to the KV capacity).")]
PricesOpt = Annotated[Optional[Path], typer.Option("--prices", help="Prices TSV/CSV: gpu, usd_per_gpu_hour, source[, date, note] (default pipeline/data/gpu_prices.tsv).")]
PriceOpt = Annotated[Optional[List[str]], typer.Option("--price", help="Override one price: GPU=USD per GPU-hour (repeat).")]
CalibrateOpt = Annotated[Optional[List[Path]], typer.Option("--calibrate", help="bench.json of this model's deployment (repeat): fit correction factors and report the error before/after.")]
PlanOutOpt = Annotated[Optional[Path], typer.Option("--out", help="Folder for plan.json and pareto.png (--slo; default build/<model>/reports/plan-<time>/).")]


def csv_list(text: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip()) if text else default


def int_list(text: str | None, default: tuple[int, ...] | None, what: str) -> tuple[int, ...] | None:
    if not text:
        return default
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise InvalidInputError(f"{what} {text!r} is not a list of positive integers.", hint=f"e.g. {what} 1,2,4")
    return values


def calibrate_only(model: Path, files: list[Path], gpus: str | None, backend: str) -> None:
    from pipeline.planner.calibrate import fit_calibration
    from pipeline.planner.shapes import model_spec_from_config

    cal = fit_calibration(files, model_spec_from_config(model), model, csv_list(gpus, ()), backend)
    rows = [["target", f"{cal.model} on {cal.gpu} ({cal.backend}), {cal.points} measured points"],
            ["fit", ", ".join(f"{k} = {v:.3f} x predicted + {cal.offsets_ms.get(k, 0):.1f} ms" for k, v in cal.factors.items())],
            ["error before", f"median {cal.error_before['median_pct']:.1f}%, worst {cal.error_before['worst_pct']:.1f}%"],
            ["error after", f"median {cal.error_after['median_pct']:.1f}%, worst {cal.error_after['worst_pct']:.1f}%"],
            ["interval", ", ".join(f"{k} x/÷ {2.718281828 ** v:.2f}" for k, v in cal.band.items())]]
    OUT.result(cal.summary(), table=simple_table("Calibration from bench results", ["", "value"], rows))


def search_command(model: Path, slo: str, isl: int, osl: int, opts: dict) -> None:
    """Parse the options into a SearchSpec, search, write plan.json + pareto.png, print; exit 2 when infeasible."""
    from pipeline.cli._options import spec_from_options
    from pipeline.planner.calibrate import fit_calibration, model_identity
    from pipeline.planner.pareto import write_plan_report
    from pipeline.planner.prices import load_prices
    from pipeline.planner.search import DEFAULT_GPUS, DEFAULT_TPS, SearchSpec, require_feasible, search
    from pipeline.planner.shapes import model_spec_from_config
    from pipeline.planner.slo import parse_slo
    from pipeline.core.paths import stage_dir

    spec = spec_from_options(
        SearchSpec, model=model, slo=parse_slo(slo), isl=isl, osl=osl, rate=opts["rate"],
        gpus=csv_list(opts["gpus"], DEFAULT_GPUS), quants=csv_list(opts["quant"], ()) or None,
        kv_caches=csv_list(opts["kv_cache"], ()) or None, tps=int_list(opts["tp"], DEFAULT_TPS, "--tp"),
        pps=int_list(opts.get("pp"), (1,), "--pp"),
        backend=opts["backend"], batch_sizes=int_list(opts["batch_sizes"], None, "--batch-sizes"),
        attention_dp=(True,) if opts.get("attention_dp") else None,
    )
    prices = load_prices(opts["prices"], opts["price"] or ())
    calibration = None
    if opts["calibrate"]:
        calibration = fit_calibration(list(opts["calibrate"]), model_spec_from_config(model), model, spec.gpus, spec.backend)
    result = search(spec, prices, calibration)
    folder = opts["out"] or stage_dir(model_identity(model), "reports") / time.strftime("plan-%Y%m%d-%H%M%S")
    files = write_plan_report(result, Path(folder))
    best = require_feasible(result)
    OUT.result({**result.model_dump(mode="json"), "files": {k: str(v) for k, v in files.items()}},
               table=_table(result), text=f"Best: {best.label()}\nReports: {files['json']} and {files['plot']}"
               + "".join(f"\nCaveat: {caveat}" for caveat in result.caveats))


def _row(c) -> list[str]:
    lat = c.latency
    band = ""
    if c.interval:
        lo, hi = c.interval["tpot_p99_ms"]
        band = f" [{lo:.1f}-{hi:.1f}]"
    cost = "-" if c.usd_per_million_output_tokens is None else f"${c.usd_per_hour:.2f}/h, ${c.usd_per_million_output_tokens:.3f}/M"
    acc = "-" if not c.accuracy else f"ppl {c.accuracy['perplexity_delta'] * 100:+.2f}%"
    return [f"{c.parallel} {c.gpu}", f"{c.quant}/{c.kv_cache}", f"{c.max_batch_size}/{c.max_num_tokens}", str(c.concurrency),
            f"{lat.ttft_p50_ms:.0f}/{lat.ttft_p99_ms:.0f}", f"{lat.tpot_p50_ms:.1f}/{lat.tpot_p99_ms:.1f}{band}",
            f"{c.tokens_per_s_per_gpu:,.0f}", f"{c.tokens_per_s_per_user:.1f}", "-" if c.replicas is None else str(c.replicas),
            cost, acc]


COLUMNS = ["GPU", "quant/KV", "batch/tokens", "conc.", "TTFT p50/p99 ms", "TPOT p50/p99 ms", "tok/s/GPU",
           "tok/s/user", "replicas", "cost", "accuracy"]


def _table(result):
    from pipeline.planner.slo import bounds_text

    rows = [_row(c) for c in result.best_per_gpu]
    rows.append(["Pareto front"] + [""] * (len(COLUMNS) - 1))
    rows += [_row(c) for c in result.pareto]
    title = (f"{result.model} ISL {result.isl} / OSL {result.osl}, SLO {bounds_text(result.slo)}: "
             f"{result.feasible} of {result.candidates} builds meet it (best per GPU, then the front)")
    return simple_table(title, COLUMNS, rows)
