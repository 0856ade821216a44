#!/usr/bin/env python
"""The planner against TensorRT-LLM's published throughput (pipeline/data/trtllm_published_throughput.tsv: TensorRT
engines of 0.17, the PyTorch backend of 1.0 and later): a table, JSON, CSV and a PNG per run.

    .venv/bin/python scripts/plan_vs_published.py [--backend tensorrt|pytorch|all] [--fit] [--cv] [--out DIR]

--fit refits each backend's GLOBAL constants (bandwidth, 16-bit, 8-bit and FP4 compute, per-layer step overhead, cost per
decoding sequence per layer; KV reads at the bandwidth measured on silicon) on all its rows, from the backend's start
(rates.prior_for: PRIOR, and the structure of that backend's model; paste them into pipeline/planner/rates.py); the
PyTorch backend's fit adds the TPOT of the serving NVIDIA measured on silicon (planner/serving_sample.py) at a tenth of
the rows' weight, and its folds hold out the held-out GPU's or model's serving rows too and report their TPOT. --cv is
the figure to quote: hold out one whole GPU, then one whole model; each fold is refitted from that start (never from a
fit that saw the held-out rows) on its training rows alone, and a constant that no training row informs (16-bit GEMMs
when every training row is FP8) stays at PRIOR.
AIConfigurator's estimate for the same rows is put beside ours from its recorded predictions (pipeline/data/
aiconfigurator_predictions.tsv; scripts/plan_vs_aiconfigurator.py), per GPU: its median and worst |error| beside ours, in
sample and with that GPU held out. --rerun-aiconfigurator asks AIConfigurator again (installed; ~40 minutes) and rewrites
that table first; --record-missing-aiconfigurator asks only for the rows it lacks. --kv-check does only this: refits each
backend with its FP8 and FP4 rows' KV cache at 16 bits and prints that fit beside the shipped one (an FP8 cache, as planned).
It also predicts the models outside the fit (pipeline/data/trtllm_published_throughput_more_models.tsv: Mistral 7B and the
PyTorch backend's Qwen3-30B-A3B and Llama 4 Scout never fitted; Mixtral fitting the engines' MoE share alone, held out by
model and by GPU with --cv) and the GPUs outside it (pipeline/data/trtllm_published_throughput_more_gpus.tsv: GB200 and
RTX PRO 6000, never fitted) and the MoE runs with attention data parallelism (pipeline/data/
trtllm_published_throughput_dep.tsv, never fitted): scripts/plan_vs_more_models.py. And the PyTorch backend's constants on an
earlier release's runs (pipeline/data/trtllm_published_throughput_0_20.tsv: 0.20's dense Llama rows, most at TP degrees the fit
never saw; never fitted): scripts/plan_vs_earlier_release.py. And the closed-loop prediction the SLO search uses (TTFT,
TPOT, tokens/s at a concurrency) against NVIDIA's published NIM serving runs (pipeline/data/nim_published_serving.tsv;
never fitted): scripts/plan_vs_nim.py. And the runs with pipeline stages (pipeline/data/trtllm_published_throughput_pp.tsv:
RTX PRO 6000, never fitted): scripts/plan_vs_pp.py. And DeepSeek R1, the model with multi-head latent attention
(pipeline/data/trtllm_published_throughput_mla.tsv: DEP on B200, GB200 and H200, never fitted), against the published
figures and against AIConfigurator's at the same batch: scripts/plan_vs_mla.py.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline import planner as P  # noqa: E402
from pipeline.core.artifacts import write_json_atomic  # noqa: E402
from pipeline.core.figures import write_figure_atomic  # noqa: E402
from pipeline.core.output import OUT, simple_table  # noqa: E402
from pipeline.core.paths import build_root  # noqa: E402
from pipeline.planner.published import BACKENDS, published_rows  # noqa: E402
from pipeline.planner.serving_sample import compare_serving, serving_error_summary, serving_rows, tpot_loss_over  # noqa: E402
from pipeline.planner.rates import PRIOR, efficiency_for, prior_for  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plan_vs_aiconfigurator import TABLE as AIC_TABLE, _key as aic_key, annotate, rerun, side_by_side  # noqa: E402
from plan_vs_earlier_release import earlier_release_report, plot_panel as earlier_release_panel  # noqa: E402
from plan_vs_earlier_release import report_lines as earlier_release_lines  # noqa: E402
from plan_vs_more_models import more_models_report, plot_panels, report_lines  # noqa: E402
from plan_vs_nim import nim_report, plot as plot_nim, report_lines as nim_lines  # noqa: E402
from plan_vs_mla import mla_lines, mla_panel, mla_report  # noqa: E402
from plan_vs_pp import pp_lines, pp_panel, pp_report  # noqa: E402

FOLD_KINDS = ("gpu", "model")  # held out: one whole GPU, then one whole model
_SIXTEEN_BIT = {"FP16", "BF16"}
_FOUR_BIT = {"FP4"}
# The PyTorch backend's fit also starts from the best point of this grid (fraction of HBM bandwidth x per-layer step
# overhead in us, the compute constants at PRIOR); see fit().
GRID_BANDWIDTH = (0.5, 0.7, 0.9)
GRID_STEP_US = (10.0, 100.0, 200.0)
# An engine's serial per-layer launch cost is bounded: its launches overlap the GPU work, and the batch-1 check in
# tests/unit/planner/test_timing.py (decode a weight read within 1.3x) allows ~30 us per layer on 8B FP8/H100. Without
# the bound the max-load rows traded it for bandwidth (the all-row fit ran to ~170 us per layer); since each run is
# replayed as the scheduler serves it (planner/offline.py) the all-row fit stays inside it, at 8.3 us.
ENGINE_OVERHEAD_CAP_US = 25.0
# The PyTorch backend's max-load rows cannot tell the weight reads' fraction from a per-iteration cost (with KV reads at
# silicon's figures its folds' fits spread from 0.72 of the bandwidth and no per-layer cost to 0.99 and 59 us); the TPOT
# of serving at 4-128 requests, which NVIDIA measured on silicon, can. Its fit adds them with this share of the
# throughput rows' total weight: enough to pin that split, too little to outweigh max load. Tried (throughput held out
# by GPU / by model, median; TPOT of the held-out serving rows by GPU / by model): 1.0 4.7% / 6.1%, 14.6% / 16.5%; 0.3
# 4.0% / 4.8%, 14.1% / 15.5%; 0.1 3.7% / 4.3%, 13.8% / 12.4% (B200 held out 3.8%); 0.03 3.8% / 4.0%, 12.4% / 9.1% (B200
# 4.6%); none 3.9% / 3.6%, 19.6% / 11.5% (B200 7.5%).
SERVING_SHARE = 0.1


def informed(rows: list[dict[str, str]]) -> list[bool]:
    """Which of the six fitted constants these rows can decide: 16-bit GEMMs need a 16-bit row, 8-bit ones an FP8 row,
    FP4 ones an FP4 row. KV reads have no constant of their own: both backends read the KV cache at silicon's figures
    (the weight reads' fraction where a GPU has none)."""
    return [True, any(r["precision"] in _SIXTEEN_BIT for r in rows),
            any(r["precision"] not in _SIXTEEN_BIT | _FOUR_BIT for r in rows), True, True,
            any(r["precision"] in _FOUR_BIT for r in rows)]


def same_model(name: str, other: str) -> bool:
    """Whether two published models have the same shapes (Llama 3.1 70B and 3.3 70B do): a fold that holds out one holds
    out the other's serving rows too."""
    if name == other:
        return True
    ignore = {"name", "source"}
    return P.published_model(name).model_dump(exclude=ignore) == P.published_model(other).model_dump(exclude=ignore)


def _all_pytorch(rows: list[dict[str, str]]) -> bool:
    return bool(rows) and all(r.get("backend") == "pytorch" for r in rows)


def _backend_prior(rows: list[dict[str, str]]) -> P.Efficiency:
    return prior_for("pytorch" if _all_pytorch(rows) else "tensorrt")


def shipped_serving(rows: list[dict[str, str]]) -> list[dict[str, str]] | None:
    """The silicon serving rows whose TPOT the shipped fit of these rows' backend adds (the PyTorch backend's), else None."""
    return serving_rows() if _all_pytorch(rows) else None


def fit(rows: list[dict[str, str]], start: P.Efficiency | None = None,
        serving: list[dict[str, str]] | None = None) -> P.Efficiency:
    """Nelder-Mead over the constants these rows (and the silicon serving rows `serving`, whose TPOT the loss adds at
    SERVING_SHARE of the throughput rows' total weight) inform, from `start`, inside physical bounds; the others keep
    `start`."""
    from scipy.optimize import minimize

    start = start or _backend_prior(rows)
    x0 = [start.bandwidth, start.compute_16bit, start.compute_8bit, start.step_overhead_per_layer_s * 1e6,
          start.per_sequence_layer_s * 1e9, start.compute_for(4)]
    free = informed(rows)

    def full(z) -> list[float]:
        values = iter(z)
        return [next(values) if is_free else x0[i] for i, is_free in enumerate(free)]

    pytorch = _all_pytorch(rows)
    overhead_cap = 500 if pytorch else ENGINE_OVERHEAD_CAP_US

    row_loss = P.loss_over(rows)
    serving_loss = tpot_loss_over(serving) if serving else None
    serving_weight = SERVING_SHARE * len(rows) / len(serving) if serving else 0.0

    def constants(x: list[float]) -> P.Efficiency:
        return replace(start, bandwidth=x[0], compute_16bit=x[1], compute_8bit=x[2], step_overhead_per_layer_s=x[3] * 1e-6,
                       per_sequence_layer_s=x[4] * 1e-9, compute_4bit=x[5])

    def loss(z) -> float:
        x = full(z)
        if not (0.2 < x[0] <= 1 and 0.1 < x[1] <= 1 and 0.1 < x[2] <= 1 and 0 <= x[3] < overhead_cap and 0 <= x[4] < 2000
                and 0.1 < x[5] <= 1):
            return 1e9
        eff = constants(x)
        return row_loss(eff) + (serving_weight * serving_loss(eff) if serving_loss else 0.0)

    # The loss has two basins: a high bandwidth with a large per-step cost, or a low bandwidth with a small one. The
    # PyTorch backend's Python-side scheduling and sampling make a large fixed cost per iteration physical, and its
    # all-row fit lies in that basin; from PRIOR alone its folds fell into the other one, so the cross-validation did not
    # measure the procedure whose constants ship. Its fit therefore also starts from the best point of a grid fixed over
    # the bounds (the same for every fold, no row involved) and keeps the lower optimum. An engine's per-layer launch
    # cost is a few us: its fit keeps the single start from PRIOR (the grid's optimum there is ~190 us per layer, which
    # no batch-1 latency supports and the max-load rows cannot refute).
    starts = [x0]
    if pytorch:
        grid = [[bw, x0[1], x0[2], us, x0[4], x0[5]] for bw in GRID_BANDWIDTH for us in GRID_STEP_US]
        starts.append(min(grid, key=lambda x: loss([v for v, is_free in zip(x, free) if is_free])))
    results = [minimize(loss, [v for v, is_free in zip(x, free) if is_free], method="Nelder-Mead",
                        options={"xatol": 1e-4, "fatol": 1e-6, "maxiter": 800}) for x in starts]
    x = full(min(results, key=lambda r: r.fun).x)
    # without an FP4 row, FP4 GEMMs follow the 8-bit fraction (PRIOR's compute_4bit is None: FP8's times the silicon FP4/FP8 ratio)
    return replace(start, bandwidth=round(x[0], 3), compute_16bit=round(x[1], 3), compute_8bit=round(x[2], 3),
                   step_overhead_per_layer_s=round(x[3], 1) * 1e-6, per_sequence_layer_s=round(x[4], 1) * 1e-9,
                   compute_4bit=round(x[5], 3) if free[5] else start.compute_4bit)


def cross_validate(rows: list[dict[str, str]], by: str, start: P.Efficiency | None = None,
                   serving: list[dict[str, str]] | None = None, fit_serving: bool = False) -> list[dict[str, Any]]:
    """Hold out each value of `by` ("gpu" or "model") in turn: fit from `start` on the other rows (with fit_serving, on the
    silicon serving rows `serving` not of the held-out GPU or model too), predict the held-out ones (and the held-out
    serving rows' TTFT and TPOT)."""
    folds = []
    for held_out in sorted({r[by] for r in rows}):
        train = [r for r in rows if r[by] != held_out]
        test = [r for r in rows if r[by] == held_out]
        out = [r for r in serving or [] if (r["gpu"] == held_out if by == "gpu" else same_model(r["model"], held_out))]
        eff = fit(train, start, [r for r in serving or [] if r not in out] if fit_serving else None)
        comparison = P.compare_published(None, test, efficiency=eff)
        folds.append({"held_out": by, "value": held_out, "train_rows": len(train), "constants": eff.as_dict(),
                      "kept_at_prior": [k for k, f in zip(eff.as_dict(), informed(train)) if not f],
                      **P.error_summary(comparison), "comparison": comparison,
                      **({"serving": compare_serving(out, eff)} if out else {})})
    return folds


def cross_validated_error(folds: list[dict[str, Any]]) -> dict[str, Any]:
    """Every row predicted by constants fitted without its fold, pooled."""
    return P.error_summary([row for fold in folds for row in fold["comparison"]])


def held_out_serving_tpot(folds: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The TPOT of the silicon serving rows of each fold's held-out GPU or model, predicted by that fold's constants, pooled
    (serving_sample.serving_error_summary: ours and AIConfigurator's); None without any."""
    compared = [r for fold in folds for r in fold.get("serving", [])]
    return serving_error_summary(compared, "tpot") if compared else None


def pooled_cross_validation(backend: str, by: str) -> tuple[list[str], dict[str, Any]]:
    """(the held-out values, the pooled figures) of one backend's cross-validation by "gpu" or "model": a top-level
    function, so a process pool can run the four apart (tests/unit/planner/test_published.py)."""
    rows = published_rows(backend)
    folds = cross_validate(rows, by, serving=shipped_serving(rows), fit_serving=True)
    return [fold["value"] for fold in folds], {**cross_validated_error(folds), "serving_tpot": held_out_serving_tpot(folds)}


def kv_precision_check(backend: str) -> dict[str, Any]:
    """Which KV cache the published FP8 and FP4 runs had, asked of the rows themselves: the backend's shipped constants
    (the fit on all its rows as planned, an FP8 KV cache: rates.py) against the same fit redone with every row's KV cache
    at 16 bits (the 16-bit rows' already is); the loss and in-sample figures of each. Nothing else differs between the two."""
    rows = published_rows(backend)
    sixteen_bit = [dict(r, kv_cache="auto") for r in rows]
    result = {}
    refitted = fit(sixteen_bit, serving=shipped_serving(rows))
    for name, variant, eff in (("as_planned", rows, efficiency_for(backend)), ("sixteen_bit_kv", sixteen_bit, refitted)):
        comparison = P.compare_published(None, variant, efficiency=eff)
        result[name] = {"loss": round(P.comparison_log_loss(comparison), 5), "constants": eff.as_dict(),
                        **P.error_summary(comparison)}
    return result


def plot(panels: dict[str, list[dict[str, Any]]], path: Path, title: str) -> None:
    """Held-out predicted vs published, one panel per backend, one colour per fold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 6), squeeze=False)
    for ax, (name, folds) in zip(axes[0], panels.items()):
        points = [r for fold in folds for r in fold["comparison"]]
        for fold in folds:
            ax.scatter([r["published_tokens_per_s"] for r in fold["comparison"]],
                       [r["predicted_tokens_per_s"] for r in fold["comparison"]], s=18,
                       label=f"{fold['value']}: median {fold['median_abs_pct_error']:.1f}%, worst {fold['max_abs_pct_error']:.0f}%")
        lo = min(min(r["published_tokens_per_s"], r["predicted_tokens_per_s"]) for r in points) * 0.7
        hi = max(max(r["published_tokens_per_s"], r["predicted_tokens_per_s"]) for r in points) * 1.4
        ax.plot([lo, hi], [lo, hi], "k-", lw=1)
        for factor in (1.2, 1 / 1.2):
            ax.plot([lo, hi], [lo * factor, hi * factor], "k:", lw=0.8)
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), title=name,
               xlabel="published output tokens/s (trtllm-bench)", ylabel="predicted, fold held out (dotted: ±20%)")
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    write_figure_atomic(fig, path, dpi=110)


def write_folds_csv(report: dict[str, Any], path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["backend", "held_out", "value", "rows", "train_rows", "median_abs_pct_error", "max_abs_pct_error",
                      "kept_at_prior", *PRIOR.as_dict()])
        for backend, part in report["backends"].items():
            for fold in part.get("folds", []):
                out.writerow([backend, fold["held_out"], fold["value"], fold["rows"], fold["train_rows"],
                              fold["median_abs_pct_error"], fold["max_abs_pct_error"], " ".join(fold["kept_at_prior"]),
                              *fold["constants"].values()])
    os.replace(tmp, path)


def write_side_by_side(report: dict[str, Any], csv_path: Path, png_path: Path) -> None:
    """Per backend and GPU: AIConfigurator's median/worst |error| beside ours (CSV, and a bar chart)."""
    entries = [{"backend": b, **e} for b, part in report["backends"].items() for e in part["aiconfigurator"]["per_gpu"]]
    if not entries:
        return
    tmp = csv_path.with_name(f".{csv_path.name}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as handle:
        out = csv.DictWriter(handle, fieldnames=list(dict.fromkeys(k for e in entries for k in e)))
        out.writeheader()
        out.writerows(entries)
    os.replace(tmp, csv_path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = [("aiconfigurator", "AIConfigurator"), ("ours_gpu_held_out", "ours, GPU held out"), ("ours_in_sample", "ours, in sample")]
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    labels = [f"{e['backend']}\n{e['gpu']} ({e['rows']})" for e in entries]
    for ax, stat in zip(axes, ("median", "max")):
        for i, (name, label) in enumerate(series):
            values = [e.get(f"{name}_{stat}_abs_pct_error", float("nan")) for e in entries]
            ax.bar([x + (i - 1) * 0.27 for x in range(len(entries))], values, width=0.27, label=label)
        ax.set(xticks=range(len(entries)), title=f"{'median' if stat == 'median' else 'worst'} |error| vs published, %")
        ax.set_xticklabels(labels, fontsize=7)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    write_figure_atomic(fig, png_path, dpi=110)


def _row_id(row: dict[str, Any]) -> tuple[str, ...]:
    """A published row: AIConfigurator's key plus the perf-overview version (1.0 and 1.2-dev publish some rows twice)."""
    return (*aic_key(row), str(row["trtllm_version"]))


def _print_comparison(backend: str, comparison: list[dict[str, Any]], eff: P.Efficiency) -> None:
    table_rows = [
        [r["model"], r["gpu"], r["tp"], r["precision"], r["isl"], r["osl"], f"{r['published_tokens_per_s']:,.0f}",
         f"{r['predicted_tokens_per_s']:,.0f}", f"{r['error_pct']:+.1f}%", r.get("aiconfigurator", ""), r["batch"], r["bound"]]
        for r in comparison
    ]
    OUT.stdout.print(simple_table(
        f"{backend}: pipeline plan vs published; constants {eff.as_dict()}",
        ["model", "gpu", "tp", "prec", "isl", "osl", "published", "predicted", "error", "AIConfigurator", "batch", "bound by"],
        table_rows,
    ))


def run_backend(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    rows = published_rows(backend)
    eff = fit(rows, serving=shipped_serving(rows)) if args.fit else efficiency_for(backend)
    comparison = P.compare_published(None, rows, efficiency=eff)
    aic = annotate(comparison)
    _print_comparison(backend, comparison, eff)
    part: dict[str, Any] = {"constants": eff.as_dict(), "fitted_now": args.fit, "in_sample": P.error_summary(comparison),
                            "aiconfigurator": aic, "rows": comparison}
    OUT.stdout.print(f"{backend}: in-sample median |error| {part['in_sample']['median_abs_pct_error']:.1f}%, worst "
                     f"{part['in_sample']['max_abs_pct_error']:.1f}% over {len(rows)} rows (not the figure to quote); "
                     f"AIConfigurator ({aic['source']}): {aic['rows_estimated']} of them estimated", highlight=False)
    if args.cv:
        part["folds"], part["cross_validated"] = [], {}
        for by in FOLD_KINDS:
            folds = cross_validate(rows, by, serving=shipped_serving(rows), fit_serving=True)
            part["folds"] += folds
            part["cross_validated"][by] = cross_validated_error(folds)
            for fold in folds:
                OUT.stdout.print(f"{backend}: held out {by} {fold['value']:15s} ({fold['rows']:3d} rows): median |error| "
                                 f"{fold['median_abs_pct_error']:5.1f}%, worst {fold['max_abs_pct_error']:5.1f}%; constants "
                                 f"{fold['constants']}" + (f", at PRIOR: {fold['kept_at_prior']}" if fold["kept_at_prior"] else ""),
                                 highlight=False)
            pooled = part["cross_validated"][by]
            OUT.stdout.print(f"{backend}: cross-validated, holding out each {by}: median |error| {pooled['median_abs_pct_error']:.1f}%, "
                             f"worst {pooled['max_abs_pct_error']:.1f}% over {pooled['rows']} rows", highlight=False)
            tpot = held_out_serving_tpot(folds)
            if tpot:
                part.setdefault("held_out_serving_tpot", {})[by] = tpot
                ours, theirs = tpot["ours"], tpot["aiconfigurator"]
                OUT.stdout.print(f"{backend}: the same folds on the silicon serving rows of the {by} each held out, TPOT: median "
                                 f"|error| {ours['median_abs_pct_error']:.1f}%, worst {ours['max_abs_pct_error']:.1f}%, mean signed "
                                 f"{ours['mean_signed_pct']:+.1f}% over {ours['rows']} rows; AIConfigurator "
                                 f"{theirs['median_abs_pct_error']:.1f}% / {theirs['max_abs_pct_error']:.1f}%, "
                                 f"{theirs['mean_signed_pct']:+.1f}% on {theirs['rows']}", highlight=False)
    held_out = None
    if args.cv:
        held_out = {_row_id(r): r["error_pct"]
                    for fold in part["folds"] if fold["held_out"] == "gpu" for r in fold["comparison"]}
    aic["per_gpu"] = side_by_side(comparison, held_out, key=_row_id)
    for entry in aic["per_gpu"]:
        OUT.stdout.print(f"{backend}: {entry['gpu']:10s} ({entry['rows']:3d} rows) AIConfigurator median/worst |error| "
                         f"{entry['aiconfigurator_median_abs_pct_error']:5.1f}% / {entry['aiconfigurator_max_abs_pct_error']:5.1f}%; ours "
                         + (f"GPU held out {entry['ours_gpu_held_out_median_abs_pct_error']:5.1f}% / "
                            f"{entry['ours_gpu_held_out_max_abs_pct_error']:5.1f}%, " if held_out else "")
                         + f"in sample {entry['ours_in_sample_median_abs_pct_error']:5.1f}% / {entry['ours_in_sample_max_abs_pct_error']:5.1f}%",
                         highlight=False)
    return part


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=[*BACKENDS, "all"], default="all")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: build/reports/plan_vs_published)")
    parser.add_argument("--fit", action="store_true", help="refit each backend's constants on all its rows (for rates.py)")
    parser.add_argument("--cv", action="store_true", help="cross-validate: hold out each GPU, then each model")
    parser.add_argument("--kv-check", action="store_true",
                        help="only refit each backend with its FP8/FP4 rows' KV cache at 16 bits and print it beside the shipped fit (~1 min)")
    parser.add_argument("--rerun-aiconfigurator", action="store_true",
                        help="ask AIConfigurator again for every row (installed; ~40 min) and rewrite pipeline/data/" + AIC_TABLE)
    parser.add_argument("--record-missing-aiconfigurator", action="store_true",
                        help="ask AIConfigurator only for the rows pipeline/data/" + AIC_TABLE + " lacks (e.g. a table added since) "
                        "and add them to it, the recorded rows kept as they are")
    parser.add_argument("--aiconfigurator-python", default=None, help="the Python AIConfigurator is installed in (with --rerun-aiconfigurator)")
    args = parser.parse_args(argv)
    if args.kv_check:
        for backend in BACKENDS if args.backend == "all" else (args.backend,):
            for name, fitted in kv_precision_check(backend).items():
                label = {"as_planned": "with an FP8 KV cache, as planned (the shipped constants)",
                         "sixteen_bit_kv": "refitted with a 16-bit KV cache"}[name]
                OUT.stdout.print(f"{backend}: FP8 and FP4 rows {label}: loss {fitted['loss']:.3f}, in-sample "
                                 f"median |error| {fitted['median_abs_pct_error']:.1f}%, worst {fitted['max_abs_pct_error']:.1f}%",
                                 highlight=False)
        return 0
    if args.rerun_aiconfigurator or args.record_missing_aiconfigurator:
        every = [r for b in BACKENDS for r in P.compare_published(None, published_rows(b))]
        every += P.compare_published(None, P.more_model_rows()) + P.compare_published(None, P.more_gpu_rows())
        every += P.compare_published(None, P.dep_rows()) + P.compare_published(None, P.earlier_release_rows())
        every += P.compare_published(None, P.pp_rows()) + P.compare_published(None, P.mla_rows())
        rerun(every, args.aiconfigurator_python, REPO / "pipeline" / "data" / AIC_TABLE, keep=args.record_missing_aiconfigurator)

    backends = BACKENDS if args.backend == "all" else (args.backend,)
    report: dict[str, Any] = {"table": "pipeline/data/trtllm_published_throughput.tsv", "prior": PRIOR.as_dict(),
                              "backends": {backend: run_backend(backend, args) for backend in backends}}
    # both backends' constants on the models outside the fit, whichever backend was asked (scripts/plan_vs_more_models.py)
    report["more_models"] = more_models_report(fit=args.fit, folds=args.cv)
    report["earlier_release"] = earlier_release_report()
    report["pipeline_parallel"] = pp_report()
    report["nim_serving"] = nim_report()
    report["latent_attention"] = mla_report()
    for line in [*report_lines(report["more_models"]), *earlier_release_lines(report["earlier_release"]),
                 *nim_lines(report["nim_serving"]),
                 *pp_lines(report["pipeline_parallel"]), *mla_lines(report["latent_attention"])]:
        OUT.stdout.print(line, highlight=False)
    out = args.out or build_root() / "reports" / "plan_vs_published"
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "plan_vs_published.json", report)
    write_folds_csv(report, out / "plan_vs_published_folds.csv")
    panels = {f"{b}, {by} held out": [f for f in part.get("folds", []) if f["held_out"] == by]
              for b, part in report["backends"].items() for by in FOLD_KINDS}
    panels = {name: folds for name, folds in panels.items() if folds} or {
        f"{b} (in sample)": [{"value": "all", **part["in_sample"], "comparison": part["rows"]}] for b, part in report["backends"].items()}
    panels.update(plot_panels(report["more_models"]))
    panels.update(earlier_release_panel(report["earlier_release"]))
    panels.update(pp_panel(report["pipeline_parallel"]))
    panels.update(mla_panel(report["latent_attention"]))
    plot(panels, out / "plan_vs_published.png", "pipeline plan vs TensorRT-LLM's published trtllm-bench throughput")
    write_side_by_side(report, out / "plan_vs_aiconfigurator.csv", out / "plan_vs_aiconfigurator.png")
    plot_nim(report["nim_serving"], out / "plan_vs_nim.png")
    OUT.info(f"wrote {out / 'plan_vs_published.json'}, plan_vs_published_folds.csv, plan_vs_published.png, "
             "plan_vs_aiconfigurator.csv/.png and plan_vs_nim.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
